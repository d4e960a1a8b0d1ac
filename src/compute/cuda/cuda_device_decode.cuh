// Exact decoding of stored weight values on the device: the same definitions
// as util/numeric.h and kernels/matmul_scalar.cpp (decode_elem_ref), written
// with bit operations so every value equals the CPU's.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "compute/cuda/cuda_kernels.h"
#include "kernels/qmatrix.h"

namespace sluice::cuda {

__device__ __forceinline__ float bf16_value(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }

__device__ __forceinline__ float f16_value(uint16_t h) {
  // Finite values by the hardware conversion (exact: every f16 value is an f32 value, subnormals
  // included); Inf and NaN from the bits, so a NaN keeps its payload as on the CPU.
  if ((h & 0x7c00u) == 0x7c00u) return __uint_as_float(uint32_t(h & 0x8000u) << 16 | 0x7f800000u | uint32_t(h & 0x3ffu) << 13);
  return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ float fp8_value(uint8_t b) {
  const uint32_t s = b >> 7, e = (b >> 3) & 15u, m = b & 7u;
  if (e == 15 && m == 7) return __uint_as_float(0x7fc00000u);
  const float v = e == 0 ? float(m) * (1.0f / 512.0f) : __uint_as_float(((e + 120u) << 23) | (m << 20));
  return s ? -v : v;
}

__device__ __forceinline__ float e8m0_value(uint8_t e) {
  if (e == 0xff) return __uint_as_float(0x7fc00000u);
  return __uint_as_float(e == 0 ? 0x00400000u : uint32_t(e) << 23);
}

__device__ __forceinline__ float fp4_value(uint32_t u) {
  // E2M1 of the low nibble: magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign. From bits alone
  // (no int->float conversion): codes 2..7 are the f32 bits (code + 252) << 22, code 1 is 0.5.
  const uint32_t m = u & 7u;
  const uint32_t mag = m >= 2u ? (m + 252u) << 22 : (m == 1u ? 0x3F000000u : 0u);
  return __uint_as_float(mag | (u & 8u) << 28);
}

// Element (r, c) of W (r relative to the view, as decode_elem_ref).
__device__ __forceinline__ float decode_elem(const QMatrix& W, int64_t r, int64_t c) {
  const uint8_t* row = W.data + r * W.row_bytes;
  const int64_t ar = W.row0 + r;
  switch (W.fmt) {
    case WeightFormat::F32: return reinterpret_cast<const float*>(row)[c];
    case WeightFormat::BF16: return bf16_value(reinterpret_cast<const uint16_t*>(row)[c]);
    case WeightFormat::F16: return f16_value(reinterpret_cast<const uint16_t*>(row)[c]);
    case WeightFormat::FP8_E4M3_BLOCK:
      return fp8_value(row[c]) * static_cast<const float*>(W.scale)[(ar / W.block) * W.scale_stride + c / W.block];
    case WeightFormat::INT4_GROUP: {
      const int u = (row[c >> 1] >> ((c & 1) * 4)) & 15;
      return float(u - 8) * bf16_value(static_cast<const uint16_t*>(W.scale)[ar * W.scale_stride + c / W.group]);
    }
    case WeightFormat::MXFP4: {
      const uint32_t u = (row[c >> 1] >> ((c & 1) * 4)) & 15;
      return fp4_value(u) * e8m0_value(static_cast<const uint8_t*>(W.scale)[ar * W.scale_stride + (c >> 5)]);
    }
    case WeightFormat::INT8_ROW:
      return float(reinterpret_cast<const int8_t*>(row)[c]) * static_cast<const float*>(W.scale)[ar];
  }
  return 0.0f;
}

__device__ __forceinline__ int64_t row_at(const RowList& l, int64_t i) {
  return l.n > kInlineRows ? l.rows[i] : l.inline_rows[i];
}
__device__ __forceinline__ float weight_at(const RowList& l, int64_t i) {
  return l.n > kInlineRows ? l.weights[i] : l.inline_weights[i];
}

}  // namespace sluice::cuda
