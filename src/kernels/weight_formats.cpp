// The CPU side of the weight-format table (kernels/weight_formats.def): names,
// the definition's decode and the scales' bytes, each format's from its codec.
#include "kernels/codecs/all.h"
#include "kernels/matmul.h"
#include "kernels/qmatrix.h"

namespace sluice {

std::string_view weight_format_name(WeightFormat f) {
  switch (f) {
#define SLUICE_WEIGHT_FORMAT(id, name, codec) \
  case WeightFormat::id: return name;
#include "kernels/weight_formats.def"
  }
  return "?";
}

float decode_elem_ref(const QMatrix& W, int64_t r, int64_t c) {
  switch (W.fmt) {
#define SLUICE_WEIGHT_FORMAT(id, name, codec) \
  case WeightFormat::id: return codecs::codec::decode(W, r, c);
#include "kernels/weight_formats.def"
  }
  return 0.0f;
}

namespace {
template <class Codec>
void decode_row(const QMatrix& W, int64_t r, float* out) {
  for (int64_t c = 0; c < W.cols; ++c) out[c] = Codec::decode(W, r, c);
}
}  // namespace

void decode_row_ref(const QMatrix& W, int64_t r, float* out) {
  switch (W.fmt) {
#define SLUICE_WEIGHT_FORMAT(id, name, codec) \
  case WeightFormat::id: return decode_row<codecs::codec>(W, r, out);
#include "kernels/weight_formats.def"
  }
}

WeightBytes weight_scale_bytes(const QMatrix& W) {
  if (W.rows == 0) return {};
  switch (W.fmt) {
#define SLUICE_WEIGHT_FORMAT(id, name, codec) \
  case WeightFormat::id: return codecs::codec::scale_bytes(W);
#include "kernels/weight_formats.def"
  }
  return {};
}

}  // namespace sluice
