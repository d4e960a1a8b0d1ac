// A 2-D weight matrix W[rows, cols] in its stored format, used as y = W x.
// Nothing is expanded: kernels decode a few values at a time in registers
// (or one row into an L1-sized buffer when many activation rows share it).
#pragma once
#include <cstdint>
#include <string_view>

namespace sluice {

// The stored formats: one per row of kernels/weight_formats.def, each a codec of its
// own (kernels/codecs/<name>.h says what its bytes and scales are).
enum class WeightFormat : uint8_t {
#define SLUICE_WEIGHT_FORMAT(id, name, codec) id,
#include "kernels/weight_formats.def"
};

std::string_view weight_format_name(WeightFormat f);

// Bytes in memory: a matrix's rows or its scales.
struct WeightBytes {
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
};

struct QMatrix {
  WeightFormat fmt = WeightFormat::F32;
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;  // row r (relative) starts at data + r * row_bytes
  int64_t row_bytes = 0;
  // Scales, addressed with the absolute row index (row0 + r) so that row slices keep working:
  //   FP8_E4M3_BLOCK: const float[ceil(R/block)][scale_stride]
  //   INT4_GROUP:     const uint16_t (bf16)[R][scale_stride], group columns each
  //   MXFP4:          const uint8_t[R][scale_stride], 32 columns each
  //   INT8_ROW:       const float[R]
  const void* scale = nullptr;
  int64_t scale_stride = 0;
  int64_t row0 = 0;
  int32_t block = 128;  // FP8 tile edge
  int32_t group = 32;   // INT4 group size

  QMatrix slice_rows(int64_t begin, int64_t count) const {
    QMatrix s = *this;
    s.data = data + begin * row_bytes;
    s.rows = count;
    s.row0 = row0 + begin;
    return s;
  }
  int64_t nbytes() const { return rows * row_bytes; }
};

// Where W's scales lie (none for a format without): the bytes besides its rows that
// its values depend on (kernels/weight_formats.cpp, from the format's codec).
WeightBytes weight_scale_bytes(const QMatrix& W);

}  // namespace sluice
