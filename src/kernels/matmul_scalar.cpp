// Scalar reference kernels: the definition of every weight format's decode.
#include <array>
#include <vector>

#include "kernels/matmul.h"
#include "util/numeric.h"

namespace sluice {

std::string_view weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32: return "f32";
    case WeightFormat::BF16: return "bf16";
    case WeightFormat::F16: return "f16";
    case WeightFormat::FP8_E4M3_BLOCK: return "fp8_e4m3_block";
    case WeightFormat::INT4_GROUP: return "int4_group";
    case WeightFormat::MXFP4: return "mxfp4";
    case WeightFormat::INT8_ROW: return "int8_row";
  }
  return "?";
}

namespace {
// fp8_e4m3_to_f32 for all 256 codes (the definition stays in util/numeric.h).
const float* fp8_table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[size_t(b)] = fp8_e4m3_to_f32(uint8_t(b));
    return t;
  }();
  return table.data();
}
}  // namespace

float decode_elem_ref(const QMatrix& W, int64_t r, int64_t c) {
  const uint8_t* row = W.data + r * W.row_bytes;
  const int64_t ar = W.row0 + r;
  switch (W.fmt) {
    case WeightFormat::F32: return reinterpret_cast<const float*>(row)[c];
    case WeightFormat::BF16: return bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]);
    case WeightFormat::F16: return f16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]);
    case WeightFormat::FP8_E4M3_BLOCK: {
      const float* s = static_cast<const float*>(W.scale) + (ar / W.block) * W.scale_stride;
      return fp8_table()[row[c]] * s[c / W.block];
    }
    case WeightFormat::INT4_GROUP: {
      const uint16_t* s = static_cast<const uint16_t*>(W.scale) + ar * W.scale_stride;
      int u = (row[c >> 1] >> ((c & 1) * 4)) & 15;
      return float(u - 8) * bf16_to_f32(s[c / W.group]);
    }
    case WeightFormat::MXFP4: {
      const uint8_t* s = static_cast<const uint8_t*>(W.scale) + ar * W.scale_stride;
      int u = (row[c >> 1] >> ((c & 1) * 4)) & 15;
      return kFp4Values[u] * e8m0_to_f32(s[c >> 5]);
    }
    case WeightFormat::INT8_ROW:
      return float(reinterpret_cast<const int8_t*>(row)[c]) * static_cast<const float*>(W.scale)[ar];
  }
  return 0.0f;
}

void decode_row_ref(const QMatrix& W, int64_t r, float* out) {
  for (int64_t c = 0; c < W.cols; ++c) out[c] = decode_elem_ref(W, r, c);
}

namespace kernels {

void matmul_rows_ref(const QMatrix& W, int64_t r0, int64_t r1, const float* X, int64_t n, int64_t ldx, float* Y,
                     int64_t ldy) {
  std::vector<float> row(size_t(W.cols));
  for (int64_t r = r0; r < r1; ++r) {
    decode_row_ref(W, r, row.data());
    for (int64_t i = 0; i < n; ++i) {
      const float* x = X + i * ldx;
      float acc = 0.0f;
      for (int64_t c = 0; c < W.cols; ++c) acc += row[size_t(c)] * x[c];
      Y[i * ldy + r] = acc;
    }
  }
}

void matvec_transposed_acc_ref(const QMatrix& W, const float* a, float* y) {
  std::vector<float> row(size_t(W.cols));
  for (int64_t r = 0; r < W.rows; ++r) {
    if (a[r] == 0.0f) continue;
    decode_row_ref(W, r, row.data());
    const float ar = a[r];
    for (int64_t c = 0; c < W.cols; ++c) y[c] += ar * row[size_t(c)];
  }
}

}  // namespace kernels

}  // namespace sluice
