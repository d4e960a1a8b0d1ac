// Fused dequantise + product for every stored weight format, and the embedding
// lookup. One warp computes one output row: each lane takes groups of 8 values
// of the weight row (4 for f32; 16, 8 or 4 bytes by format, see Group below),
// decodes them exactly in registers and accumulates in f32 against up to kTile
// activation rows; the 32 lane sums meet in a fixed shuffle tree. The order of
// every addition depends only on (weight row, activation row), so results are
// bit-identical whatever the number of activation rows.
//
// Own kernels rather than cuBLAS: cuBLAS chooses algorithms (and split-K
// reductions) by shape, so one token and a verification batch would round
// differently; and the quantized formats need fused decoding anyway.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "compute/cuda/cuda_device_decode.cuh"
#include "compute/cuda/cuda_kernels.h"

namespace sluice::cuda {

namespace {

constexpr int kWarps = 4;  // rows per block
constexpr int kTile = 8;   // activation rows per pass over a weight row

// A lane's share of a weight row is taken in groups of 8 values (4 for f32): 16 bytes of
// bf16/f16/f32, 8 of fp8/int8, 4 of int4/mxfp4. Eight values per group keep each lane's 32
// activation bytes next to its neighbours' (lane l reads x[8(g0+l) .. 8(g0+l)+8)), so an
// activation load touches 8 cache lines per warp; 32 values per lane (a whole 16 bytes of
// 4-bit weights) spread each activation load over 32 lines and held the 4-bit products to
// ~0.45 TB/s on an H200, bound by L1 wavefronts, not by the weights' bandwidth.
template <WeightFormat F>
struct Group {
  static constexpr int values = F == WeightFormat::F32 ? 4 : 8;
  static constexpr int bytes = F == WeightFormat::INT4_GROUP || F == WeightFormat::MXFP4 ? 4
                               : F == WeightFormat::FP8_E4M3_BLOCK || F == WeightFormat::INT8_ROW ? 8
                                                                                                 : 16;
  static constexpr int words = bytes / 4;
  // Loads in flight per lane before the first is used: 64 bytes whatever the format.
  static constexpr int unroll = 64 / bytes;
};

// The bytes of group g of a weight row; `aligned` (the row's start and stride 16-byte aligned):
// one load. Weights are read once, so the load streams past L1 (they would only evict the activations).
template <int Bytes>
__device__ __forceinline__ void load_group(const uint8_t* row, int64_t g, bool aligned, uint32_t* word) {
  const uint8_t* p = row + g * Bytes;
  if (aligned) {
    if constexpr (Bytes == 16) {
      const uint4 v = __ldcs(reinterpret_cast<const uint4*>(p));
      word[0] = v.x, word[1] = v.y, word[2] = v.z, word[3] = v.w;
    } else if constexpr (Bytes == 8) {
      const uint2 v = __ldcs(reinterpret_cast<const uint2*>(p));
      word[0] = v.x, word[1] = v.y;
    } else {
      word[0] = __ldcs(reinterpret_cast<const unsigned int*>(p));
    }
  } else {
#pragma unroll
    for (int k = 0; k < Bytes / 4; ++k)
      word[k] = uint32_t(p[4 * k]) | uint32_t(p[4 * k + 1]) << 8 | uint32_t(p[4 * k + 2]) << 16 |
                uint32_t(p[4 * k + 3]) << 24;
  }
}

// 2^23 + (nibble k of word), exactly: the nibble ORed into the significand of 2^23.
__device__ __forceinline__ float nibble_float(uint32_t word, int k) {
  return __uint_as_float(0x4B000000u | ((word >> (4 * k)) & 15u));
}

// Decodes group g of row r (its bytes in word[]) into w[]: columns g * values onwards.
// Scale indices use 32-bit arithmetic (64-bit divisions cost more than the decoding; a
// scale table is far below 2^32 entries).
template <WeightFormat F>
__device__ __forceinline__ void decode_group(const QMatrix& W, int64_t ar, int64_t g, const uint32_t* word, float* w) {
  const uint32_t c0 = uint32_t(g) * Group<F>::values;
  if constexpr (F == WeightFormat::F32) {
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] = __uint_as_float(word[k]);
  } else if constexpr (F == WeightFormat::BF16 || F == WeightFormat::F16) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint16_t h = uint16_t(word[k >> 1] >> ((k & 1) * 16));
      w[k] = F == WeightFormat::BF16 ? bf16_value(h) : f16_value(h);
    }
  } else if constexpr (F == WeightFormat::FP8_E4M3_BLOCK) {
    // 8 columns never straddle a block (block is a multiple of 16, checked at placement).
    // Pairs are decoded by the hardware's e4m3 -> f16 conversion, exact (every e4m3 value is
    // an f16 value), so w[] equals fp8_value's.
    const uint32_t blk = uint32_t(W.block);
    const float s =
        static_cast<const float*>(W.scale)[(uint32_t(ar) / blk) * uint32_t(W.scale_stride) + c0 / blk];
#pragma unroll
    for (int k = 0; k < 8; k += 2) {
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
          __nv_fp8x2_storage_t((word[k >> 2] >> ((k & 3) * 8)) & 0xffffu), __NV_E4M3);
      const float2 f = __half22float2(__half2(h));
      w[k] = f.x * s;
      w[k + 1] = f.y * s;
    }
  } else if constexpr (F == WeightFormat::INT8_ROW) {
    const float s = static_cast<const float*>(W.scale)[ar];
#pragma unroll
    for (int k = 0; k < 8; ++k) w[k] = float(int8_t(uint8_t(word[k >> 2] >> ((k & 3) * 8)))) * s;
  } else if constexpr (F == WeightFormat::INT4_GROUP) {
    // float(u - 8) without an integer-to-float conversion: the bits 0x4B000000 | u are the f32
    // 2^23 + u, and subtracting 2^23 + 8 leaves u - 8 exactly. Times the bf16 scale that is
    // exact too (a 4-bit integer times an 8-bit significand).
    const uint32_t grp = uint32_t(W.group);
    const uint16_t* srow = static_cast<const uint16_t*>(W.scale) + ar * W.scale_stride;
    if (grp % 8 == 0) {
      const float s = bf16_value(srow[c0 / grp]);
#pragma unroll
      for (int k = 0; k < 8; ++k) w[k] = (nibble_float(word[0], k) - 8388616.0f) * s;
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) w[k] = (nibble_float(word[0], k) - 8388616.0f) * bf16_value(srow[(c0 + k) / grp]);
    }
  } else if constexpr (F == WeightFormat::MXFP4) {
    const float s = e8m0_value(static_cast<const uint8_t*>(W.scale)[ar * W.scale_stride + c0 / 32]);
#pragma unroll
    for (int k = 0; k < 8; ++k) w[k] = fp4_value(word[0] >> (4 * k)) * s;
  }
}

// G activations at x: float4 loads when `xvec` (x 16-byte aligned, row stride a multiple of 4).
template <int G>
__device__ __forceinline__ void load_x(const float* x, bool xvec, float* v) {
  if constexpr (G % 4 == 0) {
    if (xvec) {
#pragma unroll
      for (int k = 0; k < G; k += 4) {
        const float4 q = *reinterpret_cast<const float4*>(x + k);
        v[k] = q.x, v[k + 1] = q.y, v[k + 2] = q.z, v[k + 3] = q.w;
      }
      return;
    }
  }
#pragma unroll
  for (int k = 0; k < G; ++k) v[k] = x[k];
}

// Output row r of Y = W X for n activation rows: the one definition every product kernel uses.
// Tile activation rows share each pass over the weight row (1 for a single row: fewer registers,
// more warps in flight); the additions into each output depend on neither n nor Tile.
template <WeightFormat F, int Tile>
__device__ __forceinline__ void matmul_row(const QMatrix& W, const float* __restrict__ X, int64_t n, int64_t ldx,
                                           float* __restrict__ Y, int64_t ldy, bool aligned, bool xvec, int64_t r) {
  constexpr int G = Group<F>::values, U = Group<F>::unroll;
  const int lane = threadIdx.x & 31;
  const uint8_t* row = W.data + r * W.row_bytes;
  const int64_t ar = W.row0 + r;
  const int64_t groups = W.cols / G;         // full groups
  const int64_t tail0 = groups * G;          // columns past them, done by the lane next in turn
  const int tail_lane = int(groups % 32);
  for (int64_t i0 = 0; i0 < n; i0 += Tile) {
    const int nb = int(n - i0 < Tile ? n - i0 : Tile);
    float acc[Tile];
#pragma unroll
    for (int i = 0; i < Tile; ++i) acc[i] = 0.0f;
    // U groups' loads are issued before the first is used (more bytes in flight
    // per lane); the additions stay in group order, as one group at a time.
    for (int64_t g0 = lane; g0 < groups; g0 += 32 * U) {
      uint32_t words[U][Group<F>::words];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (g0 + 32 * u < groups) load_group<Group<F>::bytes>(row, g0 + 32 * u, aligned, words[u]);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t g = g0 + 32 * u;
        if (g < groups) {
          float w[G];
          decode_group<F>(W, ar, g, words[u], w);
#pragma unroll
          for (int i = 0; i < Tile; ++i) {
            if (i < nb) {
              float x[G];
              load_x<G>(X + (i0 + i) * ldx + g * G, xvec, x);
#pragma unroll
              for (int k = 0; k < G; ++k) acc[i] = fmaf(w[k], x[k], acc[i]);
            }
          }
        }
      }
    }
    if (lane == tail_lane)
      for (int64_t c = tail0; c < W.cols; ++c) {
        const float wv = decode_elem(W, r, c);
        for (int i = 0; i < nb; ++i) acc[i] = fmaf(wv, X[(i0 + i) * ldx + c], acc[i]);
      }
#pragma unroll
    for (int i = 0; i < Tile; ++i) {
      float v = acc[i];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0 && i < nb) Y[(i0 + i) * ldy + r] = v;
    }
  }
}

template <WeightFormat F, int Tile>
__global__ void __launch_bounds__(kWarps * 32)
    matmul_kernel(QMatrix W, const float* __restrict__ X, int64_t n, int64_t ldx, float* __restrict__ Y, int64_t ldy,
                  bool aligned, bool xvec) {
  const int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r >= W.rows) return;
  matmul_row<F, Tile>(W, X, n, ldx, Y, ldy, aligned, xvec, r);
}

// One launch for several products of one format: blockIdx.y picks the product.
template <WeightFormat F, int Tile>
__global__ void __launch_bounds__(kWarps * 32) grouped_matmul_kernel(const MatmulProblem* __restrict__ problems) {
  const MatmulProblem p = problems[blockIdx.y];
  const int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r >= p.W.rows || p.n <= 0) return;
  matmul_row<F, Tile>(p.W, p.X, p.n, p.ldx, p.Y, p.ldy, p.aligned, p.xvec, r);
}

__global__ void embed_kernel(QMatrix table, RowList tokens, float* out, int64_t ldo) {
  const int64_t t = blockIdx.y;
  if (t >= tokens.n) return;
  const int64_t r = row_at(tokens, t);
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < table.cols; c += int64_t(gridDim.x) * blockDim.x)
    out[t * ldo + c] = decode_elem(table, r, c);
}

bool weight_aligned(const QMatrix& W) {
  return reinterpret_cast<uintptr_t>(W.data) % 16 == 0 && W.row_bytes % 16 == 0;
}
bool x_vectorisable(const float* X, int64_t n, int64_t ldx) {
  return reinterpret_cast<uintptr_t>(X) % 16 == 0 && (n == 1 || ldx % 4 == 0);
}

template <WeightFormat F>
int launch_matmul(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy, Stream s) {
  const bool aligned = weight_aligned(W);
  const bool xvec = x_vectorisable(X, n, ldx);
  const unsigned blocks = unsigned((W.rows + kWarps - 1) / kWarps);
  if (n == 1)
    matmul_kernel<F, 1><<<blocks, kWarps * 32, 0, cudaStream_t(s)>>>(W, X, n, ldx, Y, ldy, aligned, xvec);
  else
    matmul_kernel<F, kTile><<<blocks, kWarps * 32, 0, cudaStream_t(s)>>>(W, X, n, ldx, Y, ldy, aligned, xvec);
  return int(cudaGetLastError());
}

template <WeightFormat F>
int launch_grouped(const MatmulProblem* dev, int count, int64_t max_rows, int64_t max_n, Stream s) {
  const dim3 grid(unsigned((max_rows + kWarps - 1) / kWarps), unsigned(count));
  if (max_n == 1)
    grouped_matmul_kernel<F, 1><<<grid, kWarps * 32, 0, cudaStream_t(s)>>>(dev);
  else
    grouped_matmul_kernel<F, kTile><<<grid, kWarps * 32, 0, cudaStream_t(s)>>>(dev);
  return int(cudaGetLastError());
}

}  // namespace

void prepare_problem(MatmulProblem& p) {
  p.aligned = weight_aligned(p.W);
  p.xvec = x_vectorisable(p.X, p.n, p.ldx);
}

int grouped_matmul(WeightFormat fmt, const MatmulProblem* dev, int count, int64_t max_rows, int64_t max_n, Stream s) {
  if (count <= 0 || max_rows <= 0) return 0;
  if (count > 65535) return int(cudaErrorInvalidValue);
  switch (fmt) {
    case WeightFormat::F32: return launch_grouped<WeightFormat::F32>(dev, count, max_rows, max_n, s);
    case WeightFormat::BF16: return launch_grouped<WeightFormat::BF16>(dev, count, max_rows, max_n, s);
    case WeightFormat::F16: return launch_grouped<WeightFormat::F16>(dev, count, max_rows, max_n, s);
    case WeightFormat::FP8_E4M3_BLOCK: return launch_grouped<WeightFormat::FP8_E4M3_BLOCK>(dev, count, max_rows, max_n, s);
    case WeightFormat::INT8_ROW: return launch_grouped<WeightFormat::INT8_ROW>(dev, count, max_rows, max_n, s);
    case WeightFormat::INT4_GROUP: return launch_grouped<WeightFormat::INT4_GROUP>(dev, count, max_rows, max_n, s);
    case WeightFormat::MXFP4: return launch_grouped<WeightFormat::MXFP4>(dev, count, max_rows, max_n, s);
  }
  return int(cudaErrorInvalidValue);
}

int matmul(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy, Stream s) {
  if (n <= 0 || W.rows <= 0) return 0;
  switch (W.fmt) {
    case WeightFormat::F32: return launch_matmul<WeightFormat::F32>(W, X, n, ldx, Y, ldy, s);
    case WeightFormat::BF16: return launch_matmul<WeightFormat::BF16>(W, X, n, ldx, Y, ldy, s);
    case WeightFormat::F16: return launch_matmul<WeightFormat::F16>(W, X, n, ldx, Y, ldy, s);
    case WeightFormat::FP8_E4M3_BLOCK: return launch_matmul<WeightFormat::FP8_E4M3_BLOCK>(W, X, n, ldx, Y, ldy, s);
    case WeightFormat::INT8_ROW: return launch_matmul<WeightFormat::INT8_ROW>(W, X, n, ldx, Y, ldy, s);
    case WeightFormat::INT4_GROUP: return launch_matmul<WeightFormat::INT4_GROUP>(W, X, n, ldx, Y, ldy, s);
    case WeightFormat::MXFP4: return launch_matmul<WeightFormat::MXFP4>(W, X, n, ldx, Y, ldy, s);
  }
  return int(cudaErrorInvalidValue);
}

int embed(const QMatrix& table, const RowList& tokens, float* out, int64_t ldo, Stream s) {
  if (tokens.n <= 0) return 0;
  const dim3 grid(unsigned((table.cols + 255) / 256), unsigned(tokens.n));
  embed_kernel<<<grid, 256, 0, cudaStream_t(s)>>>(table, tokens, out, ldo);
  return int(cudaGetLastError());
}

}  // namespace sluice::cuda
