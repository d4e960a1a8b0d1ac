// What a weight format's codec is: one file per row of kernels/weight_formats.def
// (kernels/codecs/<name>.h), in two parts.
//
//  - The definition, struct codecs::<Codec> (ordinary C++, included once):
//      decode(W, r, c)  the exact f32 value of element (r, c) (r relative to the
//                       view, scales addressed with the absolute row W.row0 + r):
//                       the reference every kernel reproduces bit for bit
//      scale_bytes(W)   where the view's scales lie (the bytes an expert's
//                       checksum and reads cover beside its rows)
//  - Its SIMD decoder, struct kernels::HWY_NAMESPACE::<Codec>Codec, compiled
//    once per Highway target when kernels/matmul_simd.cpp includes the codecs:
//    how a step of packed columns decodes into f32 vectors, in which column
//    order, and the row's scale plan. kernels/codecs/simd-inl.h says what the
//    kernels ask of it; they are templates instantiated per codec.
#ifndef SLUICE_KERNELS_CODECS_CODEC_H_
#define SLUICE_KERNELS_CODECS_CODEC_H_

#include <cstdint>

#include "kernels/qmatrix.h"
#include "util/numeric.h"

namespace sluice::codecs {

// Row r's stored values as T (r relative to the view).
template <class T>
inline const T* row_values(const QMatrix& W, int64_t r) {
  return reinterpret_cast<const T*>(W.data + r * W.row_bytes);
}

// The scales of rows [row0, row0 + rows) when each row has `per_row` bytes of them.
inline WeightBytes per_row_scales(const QMatrix& W, int64_t per_row) {
  return {static_cast<const uint8_t*>(W.scale) + W.row0 * per_row, uint64_t(W.rows * per_row)};
}

// A format without scales.
struct Unscaled {
  static WeightBytes scale_bytes(const QMatrix&) { return {}; }
};

}  // namespace sluice::codecs

#endif  // SLUICE_KERNELS_CODECS_CODEC_H_
