// Tensor-core products (mma.sync m16n8k16: bf16 inputs, f32 accumulation) for the weight formats
// whose stored values are exact in bf16 once their scales stay outside the product: bf16, FP8
// e4m3 (f32 scale per block x block tile), INT4 levels u - 8 (bf16 scale per group), E2M1 codes
// (E8M0 scale per 32 columns) and int8 (f32 scale per row). Activations stay f32: each value x
// is cut into three bf16 parts whose sum is exactly x (x0 = x with its low 16 bits cleared,
// x1 = the same of x - x0, x2 = the rest, at most 8 significant bits), so every product of a
// weight and a part is exact and the sums carry f32 accuracy. F32 and F16 weights stay on the
// CUDA cores (cuda_matmul.cu), as do matrices whose shape does not fit the chunking below
// (tc_eligible): a choice made per matrix, never per call.
//
// Bits: one token == a batch. Every output element is one fixed sequence of operations that
// depends on the matrix alone (format, columns, scales), never on the number of activation rows:
//   the columns are cut into slices of kSliceCols; in each slice and for each part p, a_p starts
//   at 0 and takes the slice's chunks (KC = 32 or 64 columns, inside one scale group) in order:
//     t = the chunk's MMAs (KC/16 of them) chained from 0;  a_p = fmaf(scale, t, a_p)
//   (scale 1 for bf16 and int8); the slice's value is (a_2 + a_1) + a_0; the output is the slice
//   values added in slice order, times the row scale for int8.
// Inside an MMA a thread's share of a chunk row is KC/4 consecutive columns (one 16-byte load; 4
// bytes for 4-bit weights), placed at the same k positions in every kernel (see Tc::nibble). A
// tensor-core output element depends only on its A row, its B column and its C input
// (CudaTensorCores.ElementDependsOnlyOnItsRowAndColumn), so a token's column in a tile and a
// row's place in its 16-row tile do not change its bits: the small-n kernel packs the three
// parts of up to 8 tokens into one to three n8 tiles (one token: 3 of 8 columns used, instead of
// three tiles), the large-n kernel gives each part of 8 tokens its own n8 tile.
//
// Not cuBLAS/cuBLASLt: they choose an algorithm (and split-K) by shape, so a token alone and the
// same token in a batch would round differently; they take no per-group scales for INT4, MXFP4
// or FP8 blocks (the scale must stay outside the product to keep the weights exact in bf16),
// and no split of the f32 activations into parts with their own accumulators.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "compute/cuda/cuda_async_copy.cuh"
#include "compute/cuda/cuda_device_decode.cuh"
#include "compute/cuda/cuda_kernels.h"
#include "compute/cuda/cuda_wgmma.cuh"

namespace sluice::cuda {

namespace {

constexpr int kSliceCols = 256;  // columns per slice: the small-n kernel's unit of parallel work

// Per format: KC columns per chunk (one scale applies to a whole chunk), V values per thread per
// row per chunk, TB bytes of them. A thread's V values sit in R = V/2 bf16 pairs; MMA m of the
// chunk takes pair 2m at k slots (2 tig, 2 tig + 1) and pair 2m + 1 at (2 tig + 8, 2 tig + 9).
// Pair i holds the thread's local columns (2i, 2i + 1), or (i, i + 4) for 4-bit weights (nibble:
// one mask then extracts a pair from a 32-bit word). The activations use the same pairs.
template <WeightFormat F>
struct Tc {
  static constexpr bool nibble = F == WeightFormat::INT4_GROUP || F == WeightFormat::MXFP4;
  static constexpr bool wide = F == WeightFormat::FP8_E4M3_BLOCK || F == WeightFormat::INT8_ROW;
  static constexpr int KC = wide ? 64 : 32;
  static constexpr int V = KC / 4;
  static constexpr int R = V / 2;
  static constexpr int TB = nibble ? 4 : 16;
  static constexpr int TW = TB / 4;
  static constexpr int MMAS = KC / 16;
  static constexpr int chunk_bytes = 4 * TB;  // one row's chunk
};

// ---- exact conversions

// Two bf16 values (given as f32 values that are exact in bf16) in one register, `lo` in the low half.
__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  return __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x7632);
}

__device__ __forceinline__ uint32_t fma_bf16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// A chunk row's TW words -> R pairs of exact bf16 values (unscaled).
template <WeightFormat F>
__device__ __forceinline__ void decode_a(const uint32_t* w, uint32_t* r) {
  if constexpr (F == WeightFormat::BF16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) r[i] = w[i];
  } else if constexpr (F == WeightFormat::FP8_E4M3_BLOCK) {
    // e4m3 -> f16 by the hardware (exact), f16 -> f32 (exact), and every e4m3 value is a bf16 value.
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const __half2_raw h =
          __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t((w[i >> 1] >> ((i & 1) * 16)) & 0xffffu), __NV_E4M3);
      const float2 f = __half22float2(__half2(h));
      r[i] = bf16x2_bits(f.x, f.y);
    }
  } else if constexpr (F == WeightFormat::INT8_ROW) {
    // byte b -> the f32 2^23 + (b ^ 0x80) = 2^23 + 128 + int8(b); minus 2^23 + 128 leaves int8(b)
    // exactly, and |int8| <= 128 is exact in bf16.
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t word = w[i >> 1] ^ 0x80808080u;
      const uint32_t b = (i & 1) * 2;
      const float lo = __uint_as_float(__byte_perm(word, 0x4B00u, 0x5440u | b)) - 8388736.0f;
      const float hi = __uint_as_float(__byte_perm(word, 0x4B00u, 0x5440u | (b + 1))) - 8388736.0f;
      r[i] = bf16x2_bits(lo, hi);
    }
  } else if constexpr (F == WeightFormat::INT4_GROUP) {
    // Nibbles i and i + 4 ORed into the significand of bf16 128: 128 + u; times 1 minus 136
    // leaves u - 8 exactly.
#pragma unroll
    for (int i = 0; i < 4; ++i)
      r[i] = fma_bf16x2(((w[0] >> (4 * i)) & 0x000F000Fu) | 0x43004300u, 0x3F803F80u, 0xC308C308u);
  } else if constexpr (F == WeightFormat::MXFP4) {
    // |E2M1| doubled is an integer (0 1 2 3 4 6 8 12): one byte-permute table lookup per four
    // codes, ORed into bf16 128 and halved minus 64 (exact), then the code's sign bit.
    const uint32_t m = w[0] & 0x77777777u;
    const uint32_t v03 = __byte_perm(0x03020100u, 0x0C080604u, m);
    const uint32_t v47 = __byte_perm(0x03020100u, 0x0C080604u, m >> 16);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t p = (__byte_perm(v03, v47, uint32_t(i) | uint32_t(4 + i) << 8) & 0x00FF00FFu) | 0x43004300u;
      r[i] = fma_bf16x2(p, 0x3F003F00u, 0xC280C280u) | ((w[0] << (12 - 4 * i)) & 0x80008000u);
    }
  }
}

// The scale of the chunk at column c0 of absolute row ar (1 for the formats without one per chunk).
template <WeightFormat F>
__device__ __forceinline__ float chunk_scale(const QMatrix& W, int64_t ar, int64_t c0) {
  if constexpr (F == WeightFormat::FP8_E4M3_BLOCK) {
    const uint32_t blk = uint32_t(W.block);
    return static_cast<const float*>(W.scale)[(uint32_t(ar) / blk) * uint32_t(W.scale_stride) + uint32_t(c0) / blk];
  } else if constexpr (F == WeightFormat::INT4_GROUP) {
    return bf16_value(static_cast<const uint16_t*>(W.scale)[ar * W.scale_stride + uint32_t(c0) / uint32_t(W.group)]);
  } else if constexpr (F == WeightFormat::MXFP4) {
    return e8m0_value(static_cast<const uint8_t*>(W.scale)[ar * W.scale_stride + (c0 >> 5)]);
  } else {
    return 1.0f;
  }
}

// x with its low 16 bits cleared: a bf16 value, x - it is exact.
__device__ __forceinline__ float top16(float x) { return __uint_as_float(__float_as_uint(x) & 0xFFFF0000u); }

// The three parts of x: x0 + x1 + x2 == x exactly (for |x| above ~2^-110; below, bits under
// 2^-133 are dropped). An infinity is all in x0; a NaN makes every part NaN.
__device__ __forceinline__ void split3(float x, float& x0, float& x1, float& x2) {
  x0 = top16(x);
  const float r = x == x0 ? 0.0f : x - x0;
  x1 = top16(r);
  x2 = r - x1;
}
__device__ __forceinline__ float part_of(float x, int p) {
  float x0, x1, x2;
  split3(x, x0, x1, x2);
  return p == 0 ? x0 : p == 1 ? x1 : x2;
}

// Pair i of a thread's V local values (see Tc).
template <WeightFormat F>
__device__ __forceinline__ uint32_t pair_of(const float* v, int i) {
  if constexpr (Tc<F>::nibble)
    return bf16x2_bits(v[i], v[i + 4]);
  else
    return bf16x2_bits(v[2 * i], v[2 * i + 1]);
}

__device__ __forceinline__ void mma_bf16(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One chunk of one (16-row, 8-column) tile: the sequence every kernel uses. ag / ag8: the pairs of
// rows g and g + 8; b: the column's pairs; sg / sg8: the rows' chunk scales.
template <WeightFormat F>
__device__ __forceinline__ void chunk_step(float* acc, const uint32_t* ag, const uint32_t* ag8, const uint32_t* b,
                                           float sg, float sg8) {
  float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int m = 0; m < Tc<F>::MMAS; ++m) mma_bf16(t, ag[2 * m], ag8[2 * m], ag[2 * m + 1], ag8[2 * m + 1], b[2 * m], b[2 * m + 1]);
  acc[0] = fmaf(sg, t[0], acc[0]);
  acc[1] = fmaf(sg, t[1], acc[1]);
  acc[2] = fmaf(sg8, t[2], acc[2]);
  acc[3] = fmaf(sg8, t[3], acc[3]);
}

// A slice's value from its three part sums.
__device__ __forceinline__ float slice_value(float a0, float a1, float a2) { return (a2 + a1) + a0; }

template <WeightFormat F>
__device__ __forceinline__ float row_scale(const QMatrix& W, int64_t r) {
  if constexpr (F == WeightFormat::INT8_ROW)
    return static_cast<const float*>(W.scale)[W.row0 + r];
  else
    return 1.0f;
}

template <int TB>
__device__ __forceinline__ void load_words(const uint8_t* p, uint32_t* w) {
  if constexpr (TB == 16) {
    const uint4 v = __ldcs(reinterpret_cast<const uint4*>(p));
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else {
    w[0] = __ldcs(reinterpret_cast<const unsigned int*>(p));
  }
}

template <int V>
__device__ __forceinline__ void load_acts(const float* x, bool xvec, float* v) {
  if (xvec) {
#pragma unroll
    for (int k = 0; k < V; k += 4) {
      const float4 q = *reinterpret_cast<const float4*>(x + k);
      v[k] = q.x, v[k + 1] = q.y, v[k + 2] = q.z, v[k + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = x[k];
  }
}

// ---- small n (at most 8 activation rows): memory-bound, one 16-row tile per 1-8 warps

constexpr int kSmallWarps = 8;

// Warps per 16-row tile: one per slice up to 8, so a short matrix still spreads over the GPU.
__host__ __device__ __forceinline__ int small_warps_per_tile(int64_t cols) {
  const int64_t S = (cols + kSliceCols - 1) / kSliceCols;
  return S >= 8 ? 8 : S >= 4 ? 4 : S >= 2 ? 2 : 1;
}

// Rows of the block's tiles (tile0 onwards) for n <= 8 activation rows, whose 3n parts fill NT
// n8 tiles (column 3 i + p: part p of row i). Each warp takes its tile's slices ws, ws + WS, ...;
// after each round the block adds the round's slice values, in slice order, into yacc.
template <WeightFormat F, int NT>
__device__ __forceinline__ void small_rows(const QMatrix& W, const float* __restrict__ X, int64_t n, int64_t ldx,
                                           float* __restrict__ Y, int64_t ldy, bool xvec, int64_t tile0) {
  using T = Tc<F>;
  __shared__ float part[kSmallWarps][NT][16][8];
  __shared__ float yacc[kSmallWarps][16][8];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int64_t K = W.cols, M = W.rows;
  const int S = int((K + kSliceCols - 1) / kSliceCols);
  const int WS = small_warps_per_tile(K), MT = kSmallWarps / WS;
  const int mt = warp / WS, ws = warp % WS;
  const int64_t r0 = (tile0 + mt) * 16;
  const int64_t rg = r0 + g < M ? r0 + g : M - 1, rg8 = r0 + g + 8 < M ? r0 + g + 8 : M - 1;
  const uint8_t* wrow = W.data + rg * W.row_bytes;
  const uint8_t* wrow8 = W.data + rg8 * W.row_bytes;
  const int nn = int(n);
  const int rounds = (S + WS - 1) / WS;
  for (int rd = 0; rd < rounds; ++rd) {
    const int s = rd * WS + ws;
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    if (s < S && r0 < M) {
      constexpr int CH = kSliceCols / T::KC;
      const int64_t c_begin = int64_t(s) * kSliceCols;
      const int chunks = int((K - c_begin) / T::KC < CH ? (K - c_begin) / T::KC : CH);
      uint32_t wg[CH][T::TW], wg8[CH][T::TW];
#pragma unroll
      for (int q = 0; q < CH; ++q)
        if (q < chunks) {
          const int64_t off = (c_begin / T::KC + q) * T::chunk_bytes + tig * T::TB;
          load_words<T::TB>(wrow + off, wg[q]);
          load_words<T::TB>(wrow8 + off, wg8[q]);
        }
#pragma unroll
      for (int q = 0; q < CH; ++q)
        if (q < chunks) {
          const int64_t c0 = c_begin + int64_t(q) * T::KC;
          uint32_t ag[T::R], ag8[T::R];
          decode_a<F>(wg[q], ag);
          decode_a<F>(wg8[q], ag8);
          const float sg = chunk_scale<F>(W, W.row0 + rg, c0), sg8 = chunk_scale<F>(W, W.row0 + rg8, c0);
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            const int col = 8 * j + g, tok = col / 3, p = col % 3;
            uint32_t b[T::R];
            if (tok < nn) {
              float v[T::V];
              load_acts<T::V>(X + tok * ldx + c0 + tig * T::V, xvec, v);
#pragma unroll
              for (int k = 0; k < T::V; ++k) v[k] = part_of(v[k], p);
#pragma unroll
              for (int i = 0; i < T::R; ++i) b[i] = pair_of<F>(v, i);
            } else {
#pragma unroll
              for (int i = 0; i < T::R; ++i) b[i] = 0u;
            }
            chunk_step<F>(acc[j], ag, ag8, b, sg, sg8);
          }
        }
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      part[warp][j][g][2 * tig] = acc[j][0];
      part[warp][j][g][2 * tig + 1] = acc[j][1];
      part[warp][j][g + 8][2 * tig] = acc[j][2];
      part[warp][j][g + 8][2 * tig + 1] = acc[j][3];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < MT * 16 * nn; e += blockDim.x) {
      const int m = e / (16 * nn), row = (e / nn) % 16, t = e % nn;
      float y = rd == 0 ? 0.0f : yacc[m][row][t];
      for (int w = 0; w < WS; ++w) {
        const int ss = rd * WS + w;
        if (ss >= S) break;
        const int c = 3 * t;
        const float(*pw)[16][8] = part[m * WS + w];
        const float v = slice_value(pw[c >> 3][row][c & 7], pw[(c + 1) >> 3][row][(c + 1) & 7],
                                    pw[(c + 2) >> 3][row][(c + 2) & 7]);
        y = ss == 0 ? v : y + v;
      }
      yacc[m][row][t] = y;
    }
    __syncthreads();
  }
  for (int e = threadIdx.x; e < MT * 16 * nn; e += blockDim.x) {
    const int m = e / (16 * nn), row = (e / nn) % 16, t = e % nn;
    const int64_t r = (tile0 + m) * 16 + row;
    if (r < M) {
      float y = yacc[m][row][t];
      if constexpr (F == WeightFormat::INT8_ROW) y = y * row_scale<F>(W, r);
      Y[t * ldy + r] = y;
    }
  }
}

template <WeightFormat F, int NT>
__global__ void __launch_bounds__(kSmallWarps * 32)
    small_kernel(QMatrix W, const float* __restrict__ X, int64_t n, int64_t ldx, float* __restrict__ Y, int64_t ldy,
                 bool xvec) {
  const int64_t tiles_per_block = kSmallWarps / small_warps_per_tile(W.cols);
  small_rows<F, NT>(W, X, n, ldx, Y, ldy, xvec, int64_t(blockIdx.x) * tiles_per_block);
}

template <WeightFormat F, int NT>
__global__ void __launch_bounds__(kSmallWarps * 32) grouped_small_kernel(const MatmulProblem* __restrict__ problems) {
  const MatmulProblem p = problems[blockIdx.y];
  const int64_t tiles_per_block = kSmallWarps / small_warps_per_tile(p.W.cols);
  if (p.n <= 0 || int64_t(blockIdx.x) * tiles_per_block * 16 >= p.W.rows) return;  // whole block: uniform
  small_rows<F, NT>(p.W, p.X, p.n, p.ldx, p.Y, p.ldy, p.xvec, int64_t(blockIdx.x) * tiles_per_block);
}

// ---- large n: 128 rows x 16 TT tokens per block, k in stages of 64 columns through shared memory

constexpr int kBM = 128, kBK = 64, kStages = 3, kLargeThreads = 256;

// ---- streaming small n (at most 8 activation rows): the weights stream through shared memory

// The products of decode. One block per RT 16-row tiles, kStreamWarps warps splitting the slices
// (warp w: slices w, w + kStreamWarps, ...). Each warp streams its weight rows through its own
// ring of kStreamStages stages in shared memory (16 RT rows x 128 bytes each, 16-byte cp.async
// straight from L2, so a warp keeps three stages in flight with no registers held for them),
// reads its fragments from there (rows swizzled so a fragment load hits distinct banks) and
// computes every chunk exactly as chunk_step does in the other kernels; the activations' parts
// of a chunk serve all RT tiles. At the end of a slice the warp turns its part sums into the
// slice's values ((a2 + a1) + a0, per row and token) and leaves them in shared memory; once every
// warp is done, the block adds each output's slice values in slice order. No block barrier until
// then, so the loads of one slice overlap the products of the last.
constexpr int kStreamWarps = 4, kStreamStages = 4, kStageRowBytes = 128;

template <WeightFormat F>
struct StreamLayout {
  using T = Tc<F>;
  static constexpr int CPS = kStageRowBytes / T::chunk_bytes;         // chunks per stage
  static constexpr int SPS = (kSliceCols / T::KC) / CPS;             // stages per slice
  static constexpr int slice_row_bytes = (kSliceCols / T::KC) * T::chunk_bytes;
};

// The 16-byte piece p of stage row r sits at piece swz(p, r): 4-bit formats read 4 bytes of 8 rows
// at once (the row's low three bits spread them over the banks), the others 16 bytes of 2 rows per
// quarter warp (odd rows moved by 64 bytes).
template <int TB>
__device__ __forceinline__ int stream_swz(int p, int r) {
  return TB == 4 ? (p ^ (r & 7)) : (p ^ ((r & 1) << 2));
}

// Bytes of dynamic shared memory for RT tiles, S slices and n activation rows.
__host__ __device__ __forceinline__ int stream_smem_bytes(int RT, int64_t S, int64_t n) {
  return kStreamWarps * kStreamStages * 16 * RT * kStageRowBytes + kStreamWarps * 24 * 16 * RT * 4 +
         int(S * 16 * RT * n * 4);
}
constexpr int kStreamSmemLimit = 160 * 1024;

template <WeightFormat F, int NT, int RT>
__device__ __forceinline__ void stream_rows(const QMatrix& W, const float* __restrict__ X, int64_t n, int64_t ldx,
                                            float* __restrict__ Y, int64_t ldy, bool xvec, int64_t block,
                                            uint8_t* smem) {
  using T = Tc<F>;
  using ST = StreamLayout<F>;
  constexpr int ROWS = 16 * RT, stage_bytes = ROWS * kStageRowBytes;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int64_t K = W.cols, M = W.rows;
  const int S = int((K + kSliceCols - 1) / kSliceCols);
  const int nn = int(n);
  const int64_t r0 = block * ROWS;
  uint8_t* const ring = smem + warp * (kStreamStages * stage_bytes);
  float* const scratch = reinterpret_cast<float*>(smem + kStreamWarps * kStreamStages * stage_bytes) + warp * 24 * ROWS;
  float* const sv = reinterpret_cast<float*>(smem + kStreamWarps * kStreamStages * stage_bytes) + kStreamWarps * 24 * ROWS;
  const int my_slices = warp < S ? (S - warp + kStreamWarps - 1) / kStreamWarps : 0;
  const int nst = my_slices * ST::SPS;
  const int64_t data_bytes = (K / T::KC) * T::chunk_bytes;  // a row's bytes for K columns

  // Stage st of this warp: rows r0 .. r0 + ROWS - 1 (clamped), 128 bytes from the slice's start.
  auto issue = [&](int st) {
    const int s = warp + kStreamWarps * (st / ST::SPS);
    const int64_t off = int64_t(s) * ST::slice_row_bytes + (st % ST::SPS) * kStageRowBytes;
    uint8_t* buf = ring + (st % kStreamStages) * stage_bytes;
    const int p = lane & 7;
    const bool in = off + p * 16 < data_bytes;
#pragma unroll
    for (int i = 0; i < 4 * RT; ++i) {
      const int r = (lane >> 3) + 4 * i;
      const int64_t row = r0 + r < M ? r0 + r : M - 1;
      const uint8_t* src = W.data + row * W.row_bytes + (in ? off + p * 16 : 0);
      cp_async16(buf + r * kStageRowBytes + stream_swz<T::TB>(p, r) * 16, src, in ? 16 : 0);
    }
  };

  float sg[RT][2];
  float acc[RT][NT][4];
#pragma unroll
  for (int s = 0; s < kStreamStages - 1; ++s) {
    if (s < nst) issue(s);
    cp_async_commit();
  }
  for (int st = 0; st < nst; ++st) {
    cp_async_wait<kStreamStages - 2>();
    __syncwarp();  // stage st is in for every lane; every lane is done with stage st - 1
    if (st + kStreamStages - 1 < nst) issue(st + kStreamStages - 1);
    cp_async_commit();
    const int s = warp + kStreamWarps * (st / ST::SPS), si = st % ST::SPS;
    if (si == 0) {
#pragma unroll
      for (int m = 0; m < RT; ++m)
#pragma unroll
        for (int j = 0; j < NT; ++j) acc[m][j][0] = acc[m][j][1] = acc[m][j][2] = acc[m][j][3] = 0.0f;
    }
    const uint8_t* buf = ring + (st % kStreamStages) * stage_bytes;
#pragma unroll
    for (int q = 0; q < ST::CPS; ++q) {
      const int64_t c0 = int64_t(s) * kSliceCols + int64_t(si * ST::CPS + q) * T::KC;
      if (c0 >= K) break;
      const int boff = q * T::chunk_bytes + tig * T::TB;
      const int piece = boff >> 4, inner = boff & 15;
      uint32_t ag[RT][2][T::R];
#pragma unroll
      for (int m = 0; m < RT; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = 16 * m + g + 8 * h;
          const uint8_t* pr = buf + r * kStageRowBytes + stream_swz<T::TB>(piece, r) * 16 + inner;
          uint32_t w[T::TW];
          if constexpr (T::TB == 16) {
            const uint4 v = *reinterpret_cast<const uint4*>(pr);
            w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
          } else {
            w[0] = *reinterpret_cast<const uint32_t*>(pr);
          }
          decode_a<F>(w, ag[m][h]);
          const int64_t ar = r0 + r < M ? r0 + r : M - 1;
          sg[m][h] = chunk_scale<F>(W, W.row0 + ar, c0);
        }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int col = 8 * j + g, tok = col / 3, p = col % 3;
        uint32_t b[T::R];
        if (tok < nn) {
          float v[T::V];
          load_acts<T::V>(X + tok * ldx + c0 + tig * T::V, xvec, v);
#pragma unroll
          for (int k = 0; k < T::V; ++k) v[k] = part_of(v[k], p);
#pragma unroll
          for (int i = 0; i < T::R; ++i) b[i] = pair_of<F>(v, i);
        } else {
#pragma unroll
          for (int i = 0; i < T::R; ++i) b[i] = 0u;
        }
#pragma unroll
        for (int m = 0; m < RT; ++m) chunk_step<F>(acc[m][j], ag[m][0], ag[m][1], b, sg[m][0], sg[m][1]);
      }
    }
    if (si == ST::SPS - 1) {  // the slice is done: its values per (row, token) into sv[s]
#pragma unroll
      for (int m = 0; m < RT; ++m)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          scratch[(8 * j + 2 * tig) * ROWS + 16 * m + g] = acc[m][j][0];
          scratch[(8 * j + 2 * tig + 1) * ROWS + 16 * m + g] = acc[m][j][1];
          scratch[(8 * j + 2 * tig) * ROWS + 16 * m + g + 8] = acc[m][j][2];
          scratch[(8 * j + 2 * tig + 1) * ROWS + 16 * m + g + 8] = acc[m][j][3];
        }
      __syncwarp();
      for (int e = lane; e < ROWS * nn; e += 32) {
        const int t = e / ROWS, row = e % ROWS;
        sv[(int64_t(s) * nn + t) * ROWS + row] = slice_value(
            scratch[(3 * t) * ROWS + row], scratch[(3 * t + 1) * ROWS + row], scratch[(3 * t + 2) * ROWS + row]);
      }
      __syncwarp();
    }
  }
  cp_async_wait<0>();
  __syncthreads();
  for (int e = threadIdx.x; e < ROWS * nn; e += blockDim.x) {
    const int t = e / ROWS, row = e % ROWS;
    const int64_t r = r0 + row;
    float y = sv[t * ROWS + row];
    for (int s = 1; s < S; ++s) y = y + sv[(int64_t(s) * nn + t) * ROWS + row];
    if (r < M) {
      if constexpr (F == WeightFormat::INT8_ROW) y = y * row_scale<F>(W, r);
      Y[t * ldy + r] = y;
    }
  }
}

template <WeightFormat F, int NT, int RT>
__global__ void __launch_bounds__(kStreamWarps * 32)
    stream_kernel(QMatrix W, const float* __restrict__ X, int64_t n, int64_t ldx, float* __restrict__ Y, int64_t ldy,
                  bool xvec) {
  extern __shared__ __align__(16) uint8_t smem[];
  stream_rows<F, NT, RT>(W, X, n, ldx, Y, ldy, xvec, blockIdx.x, smem);
}

template <WeightFormat F, int NT, int RT>
__global__ void __launch_bounds__(kStreamWarps * 32) grouped_stream_kernel(const MatmulProblem* __restrict__ problems) {
  extern __shared__ __align__(16) uint8_t smem[];
  const MatmulProblem p = problems[blockIdx.y];
  if (p.n <= 0 || int64_t(blockIdx.x) * 16 * RT >= p.W.rows) return;  // whole block: uniform
  stream_rows<F, NT, RT>(p.W, p.X, p.n, p.ldx, p.Y, p.ldy, p.xvec, blockIdx.x, smem);
}

// Shared-memory layout of the large kernel (bytes). Row strides are padded so the warp's
// fragment loads fall in distinct banks.
template <WeightFormat F, int TT>
struct Large {
  static constexpr int BN = 16 * TT;                                   // tokens per block (2 warps x TT x 8)
  static constexpr int a_row = Tc<F>::nibble ? kBK / 2 : Tc<F>::wide ? kBK : kBK * 2;
  static constexpr int a_stride = Tc<F>::nibble ? 48 : Tc<F>::wide ? 64 : 192;
  static constexpr int a_bytes = kBM * a_stride;
  static constexpr int x_stride = kBK * 4;
  static constexpr int x_bytes = BN * x_stride;
  static constexpr int b_stride = Tc<F>::V == 8 ? 192 : 144;          // one (part, token) row of bf16
  static constexpr int stage_bytes = a_bytes + x_bytes;
  static constexpr int y_bytes = 2 * TT * 4 * kLargeThreads * 4;   // the slice sums so far (y below)
  static constexpr int smem = kStages * stage_bytes + 3 * BN * b_stride + y_bytes;
};

// Stage kt's weights of rows m0 .. m0 + kBM - 1 into `as` (rows L::a_stride bytes apart; past M
// the last row again, past K zeros), by threads tid, tid + NT, ...: the large kernels' weight copy
// (L: the kernel's Large layout).
template <class L, int NT>
__device__ __forceinline__ void copy_weight_stage(const QMatrix& W, int64_t m0, int kt, int tid, uint8_t* as) {
  const int64_t k0 = int64_t(kt) * kBK, K = W.cols, M = W.rows;
  constexpr int pieces_a = L::a_row / 16;  // 16-byte pieces of a row's stage
  constexpr int cols_per_piece = kBK / pieces_a;
#pragma unroll
  for (int i = tid; i < kBM * pieces_a; i += NT) {
    const int r = i / pieces_a, pc = i % pieces_a;
    const int64_t row = m0 + r < M ? m0 + r : M - 1;
    const uint8_t* src = W.data + row * W.row_bytes;
    const bool in = k0 + pc * cols_per_piece < K;
    cp_async16(as + r * L::a_stride + pc * 16, in ? src + (k0 / kBK) * L::a_row + pc * 16 : src, in ? 16 : 0);
  }
}

// Stage kt's f32 activations of tokens t0 .. t0 + BN - 1 into `xs` (tokens x_stride bytes apart;
// zeros past n and K), 16-byte copies where xvec holds, else 4-byte ones.
template <int BN, int NT>
__device__ __forceinline__ void copy_act_stage(const float* __restrict__ X, int64_t n, int64_t ldx, int64_t K, bool xvec,
                                               int64_t t0, int kt, int tid, uint8_t* xs, int x_stride) {
  const int64_t k0 = int64_t(kt) * kBK;
#pragma unroll
  for (int i = tid; i < BN * 16; i += NT) {
    const int t = i >> 4, pc = i & 15;
    const int64_t tok = t0 + t, col = k0 + pc * 4;
    const bool in = tok < n && col < K;
    uint8_t* dst = xs + t * x_stride + pc * 16;
    if (xvec) {
      cp_async16(dst, in ? X + tok * ldx + col : X, in ? 16 : 0);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) cp_async4(dst + 4 * e, in ? X + tok * ldx + col + e : X, in ? 4 : 0);
    }
  }
}

// Rows m0 .. m0 + 127, activation rows t0 .. t0 + BN - 1. Warp (wm, wn): rows 32 wm .. + 31 (two
// 16-row tiles), tokens 8 TT wn .. + 8 TT - 1; its n8 tiles are (token tile tt, part p): 3 tt + p.
// The part sums of the current slice live in registers, the sum of the slices before it in
// shared memory (touched once a slice; in registers it spilled).
template <WeightFormat F, int TT>
__device__ __forceinline__ void large_tile(const QMatrix& W, const float* __restrict__ X, int64_t n, int64_t ldx,
                                           float* __restrict__ Y, int64_t ldy, bool xvec, int64_t m0, int64_t t0,
                                           uint8_t* smem) {
  using T = Tc<F>;
  using L = Large<F, TT>;
  constexpr int BN = L::BN, NTILE = 3 * TT;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
  const int wm = warp & 3, wn = warp >> 2;
  const int64_t K = W.cols, M = W.rows;
  const int KT = int((K + kBK - 1) / kBK);
  uint8_t* const bsm = smem + kStages * L::stage_bytes;
  float* const ysm = reinterpret_cast<float*>(bsm + 3 * BN * L::b_stride);  // [2 TT 4][threads]

  // Enqueues stage kt's weights and activations (zeros past the columns, rows and tokens).
  auto issue = [&](int kt) {
    uint8_t* as = smem + (kt % kStages) * L::stage_bytes;
    copy_weight_stage<L, kLargeThreads>(W, m0, kt, tid, as);
    copy_act_stage<BN, kLargeThreads>(X, n, ldx, K, xvec, t0, kt, tid, as + L::a_bytes, L::x_stride);
  };

  float acc[2][NTILE][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int j = 0; j < NTILE; ++j) acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.0f;
  auto ys = [&](int mt, int tt, int r) -> float& { return ysm[((mt * TT + tt) * 4 + r) * kLargeThreads + tid]; };

  // The thread's four weight rows (clamped) in the scale tables.
  int64_t arow[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = m0 + wm * 32 + mt * 16 + g + 8 * h;
      arow[mt][h] = W.row0 + (r < M ? r : M - 1);
    }

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < KT) issue(s);
    cp_async_commit();
  }
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage kt is in; every warp is done with stage kt - 1 and the parts tile
    if (kt + kStages - 1 < KT) issue(kt + kStages - 1);
    cp_async_commit();
    const uint8_t* as = smem + (kt % kStages) * L::stage_bytes;
    const uint8_t* xs = as + L::a_bytes;
    const int64_t k0 = int64_t(kt) * kBK;
    constexpr int QN = kBK / T::KC;
    float sc[QN][2][2];
#pragma unroll
    for (int q = 0; q < QN; ++q)
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          sc[q][mt][h] = k0 + q * T::KC < K ? chunk_scale<F>(W, arow[mt][h], k0 + q * T::KC) : 0.0f;
    // The stage's activations -> three bf16 parts, each 8-value block in pair order.
    for (int i = tid; i < BN * (kBK / 8); i += kLargeThreads) {
      const int t = i / (kBK / 8), kb = i % (kBK / 8);
      const float4 lo = *reinterpret_cast<const float4*>(xs + t * L::x_stride + kb * 32);
      const float4 hi = *reinterpret_cast<const float4*>(xs + t * L::x_stride + kb * 32 + 16);
      const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      float p0[8], p1[8], p2[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) split3(v[k], p0[k], p1[k], p2[k]);
      const float* ps[3] = {p0, p1, p2};
#pragma unroll
      for (int p = 0; p < 3; ++p) {
        uint4 o;
        if constexpr (Tc<F>::nibble)
          o = make_uint4(pair_of<F>(ps[p], 0), pair_of<F>(ps[p], 1), pair_of<F>(ps[p], 2), pair_of<F>(ps[p], 3));
        else
          o = make_uint4(bf16x2_bits(ps[p][0], ps[p][1]), bf16x2_bits(ps[p][2], ps[p][3]),
                         bf16x2_bits(ps[p][4], ps[p][5]), bf16x2_bits(ps[p][6], ps[p][7]));
        *reinterpret_cast<uint4*>(bsm + (p * BN + t) * L::b_stride + kb * 16) = o;
      }
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < QN; ++q) {
      if (k0 + q * T::KC >= K) break;
      uint32_t ra[2][2][T::R];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint8_t* p = as + (wm * 32 + mt * 16 + g + 8 * h) * L::a_stride + q * T::chunk_bytes + tig * T::TB;
          uint32_t w[T::TW];
          if constexpr (T::TB == 16) {
            const uint4 v = *reinterpret_cast<const uint4*>(p);
            w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
          } else {
            w[0] = *reinterpret_cast<const uint32_t*>(p);
          }
          decode_a<F>(w, ra[mt][h]);
        }
#pragma unroll
      for (int j = 0; j < NTILE; ++j) {
        const int p = j % 3, tt = j / 3;
        const uint8_t* bp = bsm + (p * BN + wn * TT * 8 + tt * 8 + g) * L::b_stride + (q * T::KC + tig * T::V) * 2;
        uint32_t b[T::R];
#pragma unroll
        for (int i = 0; i < T::R; i += 4) {
          const uint4 v = *reinterpret_cast<const uint4*>(bp + i * 4);
          b[i] = v.x, b[i + 1] = v.y, b[i + 2] = v.z, b[i + 3] = v.w;
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) chunk_step<F>(acc[mt][j], ra[mt][0], ra[mt][1], b, sc[q][mt][0], sc[q][mt][1]);
      }
    }
    if ((k0 + kBK) % kSliceCols == 0 || k0 + kBK >= K) {  // a slice ends with this stage
      const bool first = k0 < kSliceCols;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int tt = 0; tt < TT; ++tt)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const float v = slice_value(acc[mt][3 * tt][r], acc[mt][3 * tt + 1][r], acc[mt][3 * tt + 2][r]);
            ys(mt, tt, r) = first ? v : ys(mt, tt, r) + v;
            acc[mt][3 * tt][r] = acc[mt][3 * tt + 1][r] = acc[mt][3 * tt + 2][r] = 0.0f;
          }
    }
  }
  cp_async_wait<0>();
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int tt = 0; tt < TT; ++tt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int64_t row = m0 + wm * 32 + mt * 16 + g + (r >= 2 ? 8 : 0);
        const int64_t tok = t0 + wn * TT * 8 + tt * 8 + 2 * tig + (r & 1);
        if (row < M && tok < n) {
          float v = ys(mt, tt, r);
          if constexpr (F == WeightFormat::INT8_ROW) v = v * row_scale<F>(W, row);
          Y[tok * ldy + row] = v;
        }
      }
}

// The large kernel, pipelined (the default where the warpgroup kernel cannot run;
// SLUICE_CUDA_TC_LARGE=0 keeps large_tile above, for comparisons): the same products in the same order from the same shared-memory tiles (128 rows x
// BN tokens, 64 columns a stage), with more warps and one block barrier per stage instead of two.
// - 16 warps for BN >= 32 (4 x 4: 32 rows x BN / 4 tokens each, at most 128 registers), 8 for
//   BN = 16 (4 x 2: 32 x 8).
// - The activations of stage kt + 1 are split into their parts (into one of two parts tiles) while
//   the tensor cores take stage kt from the other; they travel one stage ahead of the weights
//   (cp.async group kt: the weights of stage kt and the activations of stage kt + 1).
// - In a chunk a warp takes its n8 tiles one (token tile, part) at a time for both row tiles: two
//   MMA chains interleave (the MMAs of one chain still follow each other from 0).
// Measured on an H100 (512 tokens, 7168 x 16384): 1.06-1.10x large_tile for bf16, fp8 and int4,
// about even for int8 and mxfp4. Tried and dropped: 8 warps of 64 rows (each B fragment serving
// four row tiles) ran 0.85-1.06x. An H200 ran this loop with the split, the scale FMAs and all but
// one B fragment load per chunk taken out at only ~40% of the measured mma.sync rate, so what
// bounds it is not (only) those.
template <int TT>
constexpr int large_warps() {
  return TT >= 2 ? 16 : 8;
}

template <WeightFormat F, int TT>
struct LargeDb {
  using L = Large<F, TT>;
  static constexpr int NW = large_warps<TT>(), threads = NW * 32;
  static constexpr int WMW = 4;               // warps along the rows
  static constexpr int MT = kBM / 16 / WMW;   // 16-row tiles per warp
  static constexpr int WN = NW / WMW;         // warps along the tokens
  static constexpr int TTW = 2 * TT / WN;     // n8 token tiles per warp
  static_assert(TTW >= 1 && TTW * WN * 8 == L::BN, "warp layout");
  static constexpr int b_bytes = 3 * L::BN * L::b_stride;  // one parts tile
  static constexpr int y_bytes = MT * TTW * 4 * threads * 4;
  static constexpr int smem = kStages * L::stage_bytes + 2 * b_bytes + y_bytes;
  static_assert(smem <= 227 * 1024, "shared memory");
};

template <WeightFormat F, int TT>
__device__ __forceinline__ void large_tile_db(const QMatrix& W, const float* __restrict__ X, int64_t n, int64_t ldx,
                                              float* __restrict__ Y, int64_t ldy, bool xvec, int64_t m0, int64_t t0,
                                              uint8_t* smem) {
  using T = Tc<F>;
  using L = Large<F, TT>;
  using D = LargeDb<F, TT>;
  constexpr int BN = L::BN, NT = D::threads, TTW = D::TTW, MT = D::MT;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
  const int wm = warp % D::WMW, wn = warp / D::WMW;
  const int64_t K = W.cols, M = W.rows;
  const int KT = int((K + kBK - 1) / kBK);
  uint8_t* const bsm0 = smem + kStages * L::stage_bytes;
  float* const ysm = reinterpret_cast<float*>(bsm0 + 2 * D::b_bytes);  // [MT TTW 4][threads]

  // Stage kt's weights into slot kt % kStages.
  auto issue_a = [&](int kt) { copy_weight_stage<L, NT>(W, m0, kt, tid, smem + (kt % kStages) * L::stage_bytes); };
  // Stage kt's activations into slot kt % kStages (zeros past the columns and tokens).
  auto issue_x = [&](int kt) {
    copy_act_stage<BN, NT>(X, n, ldx, K, xvec, t0, kt, tid, smem + (kt % kStages) * L::stage_bytes + L::a_bytes,
                           L::x_stride);
  };
  // Stage kt's activations (slot kt % kStages) -> three bf16 parts in parts tile kt & 1.
  auto split = [&](int kt) {
    const uint8_t* xs = smem + (kt % kStages) * L::stage_bytes + L::a_bytes;
    uint8_t* bsm = bsm0 + (kt & 1) * D::b_bytes;
#pragma unroll
    for (int i = tid; i < BN * (kBK / 8); i += NT) {
      const int t = i / (kBK / 8), kb = i % (kBK / 8);
      const float4 lo = *reinterpret_cast<const float4*>(xs + t * L::x_stride + kb * 32);
      const float4 hi = *reinterpret_cast<const float4*>(xs + t * L::x_stride + kb * 32 + 16);
      const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      float p0[8], p1[8], p2[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) split3(v[k], p0[k], p1[k], p2[k]);
      const float* ps[3] = {p0, p1, p2};
#pragma unroll
      for (int p = 0; p < 3; ++p) {
        uint4 o;
        if constexpr (Tc<F>::nibble)
          o = make_uint4(pair_of<F>(ps[p], 0), pair_of<F>(ps[p], 1), pair_of<F>(ps[p], 2), pair_of<F>(ps[p], 3));
        else
          o = make_uint4(bf16x2_bits(ps[p][0], ps[p][1]), bf16x2_bits(ps[p][2], ps[p][3]),
                         bf16x2_bits(ps[p][4], ps[p][5]), bf16x2_bits(ps[p][6], ps[p][7]));
        *reinterpret_cast<uint4*>(bsm + (p * BN + t) * L::b_stride + kb * 16) = o;
      }
    }
  };

  float acc[MT][TTW][3][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int tt = 0; tt < TTW; ++tt)
#pragma unroll
      for (int p = 0; p < 3; ++p) acc[mt][tt][p][0] = acc[mt][tt][p][1] = acc[mt][tt][p][2] = acc[mt][tt][p][3] = 0.0f;
  auto ys = [&](int mt, int tt, int r) -> float& { return ysm[((mt * TTW + tt) * 4 + r) * NT + tid]; };

  int64_t arow[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = m0 + wm * (16 * MT) + mt * 16 + g + 8 * h;
      arow[mt][h] = W.row0 + (r < M ? r : M - 1);
    }

  // Groups: X(0); then per stage s: A(s), X(s + 1).
  issue_x(0);
  cp_async_commit();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < KT) issue_a(s);
    if (s + 1 < KT) issue_x(s + 1);
    cp_async_commit();
  }
  cp_async_wait<kStages - 1>();
  __syncthreads();
  split(0);
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kStages - 2>();
    // A(kt) and X(kt + 1) are in; parts tile kt & 1 is written; every warp is done with stage
    // kt - 1 (weights slot, activations slot of kt + 2, parts tile (kt + 1) & 1).
    __syncthreads();
    if (kt + kStages - 1 < KT) issue_a(kt + kStages - 1);
    if (kt + kStages < KT) issue_x(kt + kStages);
    cp_async_commit();
    if (kt + 1 < KT) split(kt + 1);
    const uint8_t* as = smem + (kt % kStages) * L::stage_bytes;
    const uint8_t* bsm = bsm0 + (kt & 1) * D::b_bytes;
    const int64_t k0 = int64_t(kt) * kBK;
    constexpr int QN = kBK / T::KC;
#pragma unroll
    for (int q = 0; q < QN; ++q) {
      if (k0 + q * T::KC >= K) break;
      float sc[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) sc[mt][h] = chunk_scale<F>(W, arow[mt][h], k0 + q * T::KC);
      uint32_t ra[MT][2][T::R];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = wm * (16 * MT) + mt * 16 + g + 8 * h;
          const uint8_t* p = as + row * L::a_stride + q * T::chunk_bytes + tig * T::TB;
          uint32_t w[T::TW];
          if constexpr (T::TB == 16) {
            const uint4 v = *reinterpret_cast<const uint4*>(p);
            w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
          } else {
            w[0] = *reinterpret_cast<const uint32_t*>(p);
          }
          decode_a<F>(w, ra[mt][h]);
        }
#pragma unroll
      for (int tt = 0; tt < TTW; ++tt)
#pragma unroll
        for (int p = 0; p < 3; ++p) {
          uint32_t b[T::R];
          const uint8_t* bp = bsm + (p * BN + wn * TTW * 8 + tt * 8 + g) * L::b_stride + (q * T::KC + tig * T::V) * 2;
#pragma unroll
          for (int i = 0; i < T::R; i += 4) {
            const uint4 v = *reinterpret_cast<const uint4*>(bp + i * 4);
            b[i] = v.x, b[i + 1] = v.y, b[i + 2] = v.z, b[i + 3] = v.w;
          }
          // chunk_step for the warp's row tiles, their MMAs interleaved.
          float t[MT][4];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) t[mt][0] = t[mt][1] = t[mt][2] = t[mt][3] = 0.0f;
#pragma unroll
          for (int m = 0; m < T::MMAS; ++m)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
              mma_bf16(t[mt], ra[mt][0][2 * m], ra[mt][1][2 * m], ra[mt][0][2 * m + 1], ra[mt][1][2 * m + 1], b[2 * m],
                       b[2 * m + 1]);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            acc[mt][tt][p][0] = fmaf(sc[mt][0], t[mt][0], acc[mt][tt][p][0]);
            acc[mt][tt][p][1] = fmaf(sc[mt][0], t[mt][1], acc[mt][tt][p][1]);
            acc[mt][tt][p][2] = fmaf(sc[mt][1], t[mt][2], acc[mt][tt][p][2]);
            acc[mt][tt][p][3] = fmaf(sc[mt][1], t[mt][3], acc[mt][tt][p][3]);
          }
        }
    }
    if ((k0 + kBK) % kSliceCols == 0 || k0 + kBK >= K) {  // a slice ends with this stage
      const bool first = k0 < kSliceCols;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int tt = 0; tt < TTW; ++tt)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const float v = slice_value(acc[mt][tt][0][r], acc[mt][tt][1][r], acc[mt][tt][2][r]);
            ys(mt, tt, r) = first ? v : ys(mt, tt, r) + v;
            acc[mt][tt][0][r] = acc[mt][tt][1][r] = acc[mt][tt][2][r] = 0.0f;
          }
    }
  }
  cp_async_wait<0>();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int tt = 0; tt < TTW; ++tt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int64_t row = m0 + wm * (16 * MT) + mt * 16 + g + (r >= 2 ? 8 : 0);
        const int64_t tok = t0 + wn * TTW * 8 + tt * 8 + 2 * tig + (r & 1);
        if (row < M && tok < n) {
          float v = ys(mt, tt, r);
          if constexpr (F == WeightFormat::INT8_ROW) v = v * row_scale<F>(W, row);
          Y[tok * ldy + row] = v;
        }
      }
}

// ---- the large kernel on the warpgroup MMAs (sm_90a; the default on Hopper where it is built)
//
// The same products in the same order as large_tile_db (chunk chains from 0 on the tensor cores,
// one FMA of the chunk scale per part sum, slice values (a2 + a1) + a0 added in slice order), on
// wgmma instead of mma.sync: a warpgroup takes 64 rows (each warp 16, its A fragments decoded in
// registers exactly as the mma.sync kernels do) against all 3 T (part, token) columns of the
// block at once, B read by the tensor cores from shared memory. A k16 step of wgmma and one of
// mma.sync give the same bits (the tests compare every large-n result with the one-token one).
// Two warpgroups (128 rows) per block; T = 16, 32 or 64 tokens per block.
// The parts tile is laid out as wgmma's canonical K-major blocks without swizzle: 8 (part, token)
// rows x 8 k slots of 16 bytes each, 128-byte blocks, the next block along k 128 bytes on (the
// descriptor's leading byte offset), the next 8 rows kBK / 8 blocks on (its stride byte offset).
// The split writes each activation part at the k slot where the mma.sync kernels' B fragment
// puts it (pair 2m + h of thread tig: slots 2 tig + e + 8 h of k16 step m; see Tc).
template <WeightFormat F, int T, bool PRE>
struct LargeWg {
  using L = Large<F, 1>;
  static constexpr int N = 3 * T;                     // wgmma columns: part p, token t at p T + t
  static constexpr int threads = 256;                 // two warpgroups
  static constexpr int a_bytes = kBM * L::a_stride;   // a stage's weights (padded rows, as Large)
  static constexpr int x_stride = kBK * 4 + 16;       // a token's stage of activations (f32), padded
  static constexpr int b_bytes = N * kBK * 2;         // one parts tile
  // PRE: a stage holds the weights and the parts tile (copied from the pre-split parts); else the
  // weights and the f32 activations, split into one of two parts tiles one stage ahead.
  static constexpr int x_bytes = PRE ? b_bytes : T * x_stride;
  static constexpr int stage_bytes = a_bytes + x_bytes;
  static constexpr int parts_bytes = PRE ? 0 : 2 * b_bytes;
  static constexpr int y_bytes = (T / 2) * threads * 4;  // the slice sums so far
  static constexpr int stages = 4 * stage_bytes + parts_bytes + y_bytes <= 227 * 1024 ? 4 : 3;
  static constexpr int smem = stages * stage_bytes + parts_bytes + y_bytes;
  static_assert(stage_bytes % 16 == 0, "alignment");
  static_assert(smem <= 227 * 1024, "shared memory");
};

// ---- the activations' parts split once per product (pre-split; the warpgroup kernel's input)
//
// Every (16-row tile, 128 rows) block of the warpgroup kernel used to split the same activations
// into their parts (56 times over for 7168 rows). The pre-split writes each activation row's parts
// once, per stage of kBK columns, as the three 128-byte part rows of the kernel's parts tile (k
// slot order, 16-byte blocks of 8 slots): token r's stage kt at r * KT * kPartsRow + kt * kPartsRow,
// part p at p * 128 on. The kernel copies them into shared memory as they are; the values and
// their k slots are the split's own, so the bits are the same.
constexpr int kPartsRow = 3 * kBK * 2;

// Column (in its chunk) of the value at k slot `slot` of half h of k16 step m of a split item: the
// mma.sync B fragment's pairs (see Tc): pair 2 m + h, element e of thread tg is slot 2 tg + e.
template <WeightFormat F>
__device__ __forceinline__ int item_col(int m, int h, int slot) {
  const int tg = slot >> 1, e = slot & 1;
  if constexpr (Tc<F>::nibble)
    return tg * Tc<F>::V + 2 * m + 4 * e + h;  // pair i: columns (i, i + 4)
  else
    return tg * Tc<F>::V + 4 * m + 2 * h + e;  // pair i: columns (2 i, 2 i + 1)
}

// Eight values' three parts as one 16-byte block of each part row.
__device__ __forceinline__ void item_parts(const float* v, uint4* o) {
  float p0[8], p1[8], p2[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) split3(v[k], p0[k], p1[k], p2[k]);
  const float* ps[3] = {p0, p1, p2};
#pragma unroll
  for (int p = 0; p < 3; ++p)
    o[p] = make_uint4(bf16x2_bits(ps[p][0], ps[p][1]), bf16x2_bits(ps[p][2], ps[p][3]),
                      bf16x2_bits(ps[p][4], ps[p][5]), bf16x2_bits(ps[p][6], ps[p][7]));
}

// Rows 0 .. n - 1 of X (K columns) -> their parts at P. Thread (token, item): the item's 16
// values (k16 step m of chunk q), as the kernel's own split takes them.
template <WeightFormat F>
__global__ void __launch_bounds__(256) split_parts_kernel(const float* __restrict__ X, int64_t n, int64_t ldx,
                                                          int64_t K, uint8_t* __restrict__ P) {
  using TC = Tc<F>;
  constexpr int per_t = (kBK / TC::KC) * TC::MMAS;
  const int KT = int((K + kBK - 1) / kBK), kt = int(blockIdx.x);
  const int64_t i = int64_t(blockIdx.y) * 256 + threadIdx.x, r = i / per_t;
  if (r >= n) return;
  const int qm = int(i % per_t), q = qm / TC::MMAS, m = qm % TC::MMAS;
  const int64_t c0 = int64_t(kt) * kBK + q * TC::KC;  // the chunk lies all inside K or all past it
  const float* x = X + r * ldx + c0;
  uint8_t* dst = P + (r * KT + kt) * kPartsRow;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = c0 < K ? x[item_col<F>(m, h, k)] : 0.0f;
    uint4 o[3];
    item_parts(v, o);
    const int u = (q * TC::KC + 16 * m + 8 * h) / 8;
#pragma unroll
    for (int p = 0; p < 3; ++p) *reinterpret_cast<uint4*>(dst + p * (kBK * 2) + u * 16) = o[p];
  }
}

// Matrix descriptor of a K-major bf16 tile without swizzle (see LargeWg).
__device__ __forceinline__ uint64_t wg_desc(const void* p) {
  const uint64_t a = uint64_t(__cvta_generic_to_shared(p));
  return ((a & 0x3FFFF) >> 4) | (uint64_t(128 >> 4) << 16) | (uint64_t((kBK / 8) * 128 >> 4) << 32);
}

// PRE: the activations come as their parts (`parts`: the pre-split of the rows X points at), else
// as f32 values the block splits itself.
template <WeightFormat F, int T, bool PRE>
__device__ __forceinline__ void large_tile_wg(const QMatrix& W, const float* __restrict__ X, int64_t n, int64_t ldx,
                                              float* __restrict__ Y, int64_t ldy, bool xvec, int64_t m0, int64_t t0,
                                              const uint8_t* __restrict__ parts, uint8_t* smem) {
  using TC = Tc<F>;
  using L = Large<F, 1>;
  using D = LargeWg<F, T, PRE>;
  constexpr int N = D::N, NT = D::threads, ST = D::stages, ND = N / 2, QN = kBK / TC::KC;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
  const int64_t K = W.cols, M = W.rows;
  const int KT = int((K + kBK - 1) / kBK);
  uint8_t* const bsm0 = smem + ST * D::stage_bytes;
  float* const ysm = reinterpret_cast<float*>(bsm0 + D::parts_bytes);  // [T / 2][threads]
  const int wrow = warp * 16;  // the warp's 16 rows in the block (warpgroup warp / 4: rows 64 (warp / 4) ..)

  auto issue_a = [&](int kt) { copy_weight_stage<L, NT>(W, m0, kt, tid, smem + (kt % ST) * D::stage_bytes); };
  auto issue_x = [&](int kt) {
    uint8_t* xs = smem + (kt % ST) * D::stage_bytes + D::a_bytes;
    if constexpr (PRE) {
      // The stage's parts tile: 16-byte block u of part row p of token t goes to tile row p T + t.
      // A quarter warp takes 8 tokens' same block (distinct banks), a warp 4 blocks of them (64
      // bytes of each token's part row in global memory).
#pragma unroll
      for (int i = tid; i < 24 * T; i += NT) {
        const int tl = i & 7, ul = (i >> 3) & 3, rest = i >> 5, uh = rest & 1, p = (rest >> 1) % 3;
        const int t = ((rest >> 1) / 3) * 8 + tl, u = uh * 4 + ul, row = p * T + t;
        const bool in = t0 + t < n;
        const uint8_t* src = parts + ((t0 + t) * KT + kt) * int64_t(kPartsRow) + p * (kBK * 2) + u * 16;
        cp_async16(xs + (row >> 3) * ((kBK / 8) * 128) + u * 128 + (row & 7) * 16, in ? src : parts, in ? 16 : 0);
      }
    } else {
      copy_act_stage<T, NT>(X, n, ldx, K, xvec, t0, kt, tid, xs, D::x_stride);
    }
  };
  // Stage kt's activations -> the three parts, at their k slots, in parts tile kt & 1. A (part,
  // token) row's 16 k slots of chunk q, k16 step m (two 8-slot blocks h = 0, 1: 2 tig + e + 8 h
  // holds pair 2 m + h, element e, of thread tig's columns) come from 8 float2 loads (4-bit: the
  // pair's columns i, i + 4) or 4 float4 loads (the others: columns 2 i, 2 i + 1). Neighbouring
  // lanes take neighbouring tokens, so each quarter warp's 16-byte stores fill one 128-byte block
  // (no bank conflicts) and its float4 loads fall in distinct banks (rows 68 words apart).
  auto split = [&](int kt) {
    const float* xs = reinterpret_cast<const float*>(smem + (kt % ST) * D::stage_bytes + D::a_bytes);
    uint8_t* bsm = bsm0 + (kt & 1) * D::b_bytes;
    constexpr int per_t = QN * TC::MMAS;
#pragma unroll
    for (int i = tid; i < T * per_t; i += NT) {
      const int t = i % T, qm = i / T, q = qm / TC::MMAS, m = qm % TC::MMAS;
      const float* xt = xs + t * (D::x_stride / 4) + q * TC::KC;
      float v[2][8];  // [h][slot]
      if constexpr (TC::nibble) {
#pragma unroll
        for (int tg = 0; tg < 4; ++tg)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float2 f = *reinterpret_cast<const float2*>(xt + tg * TC::V + 2 * m + 4 * e);
            v[0][2 * tg + e] = f.x, v[1][2 * tg + e] = f.y;
          }
      } else {
#pragma unroll
        for (int tg = 0; tg < 4; ++tg) {
          const float4 f = *reinterpret_cast<const float4*>(xt + tg * TC::V + 4 * m);
          v[0][2 * tg] = f.x, v[0][2 * tg + 1] = f.y, v[1][2 * tg] = f.z, v[1][2 * tg + 1] = f.w;
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint4 o[3];
        item_parts(v[h], o);
        const int u = (q * TC::KC + 16 * m + 8 * h) / 8;
#pragma unroll
        for (int p = 0; p < 3; ++p) {
          const int row = p * T + t;
          *reinterpret_cast<uint4*>(bsm + (row >> 3) * ((kBK / 8) * 128) + u * 128 + (row & 7) * 16) = o[p];
        }
      }
    }
    // The tensor cores read the tile through the async proxy.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  };

  float acc[ND];
#pragma unroll
  for (int i = 0; i < ND; ++i) acc[i] = 0.0f;
  auto ys = [&](int j, int r) -> float& { return ysm[(j * 4 + r) * NT + tid]; };
  int64_t arow[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = m0 + wrow + g + 8 * h;
    arow[h] = W.row0 + (r < M ? r : M - 1);
  }

  // Groups: PRE: per stage s: A(s) and its parts. Else X(0), then per stage s: A(s), X(s + 1).
  if constexpr (PRE) {
#pragma unroll
    for (int s = 0; s < ST - 1; ++s) {
      if (s < KT) issue_a(s), issue_x(s);
      cp_async_commit();
    }
  } else {
    issue_x(0);
    cp_async_commit();
#pragma unroll
    for (int s = 0; s < ST - 1; ++s) {
      if (s < KT) issue_a(s);
      if (s + 1 < KT) issue_x(s + 1);
      cp_async_commit();
    }
    cp_async_wait<ST - 1>();
    __syncthreads();
    split(0);
  }
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<ST - 2>();
    // PRE: the tensor cores read the copied parts tile through the async proxy.
    if constexpr (PRE) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if constexpr (PRE) {
      if (kt + ST - 1 < KT) issue_a(kt + ST - 1), issue_x(kt + ST - 1);
    } else {
      if (kt + ST - 1 < KT) issue_a(kt + ST - 1);
      if (kt + ST < KT) issue_x(kt + ST);
    }
    cp_async_commit();
    const uint8_t* as = smem + (kt % ST) * D::stage_bytes;
    const uint8_t* bsm = PRE ? as + D::a_bytes : bsm0 + (kt & 1) * D::b_bytes;
    const int64_t k0 = int64_t(kt) * kBK;
    float sc[QN][2];
#pragma unroll
    for (int q = 0; q < QN; ++q)
#pragma unroll
      for (int h = 0; h < 2; ++h) sc[q][h] = k0 + q * TC::KC < K ? chunk_scale<F>(W, arow[h], k0 + q * TC::KC) : 0.0f;
    // Chunk q: its A fragments, then its MMAs (asynchronous; the first step starts the chain from
    // zero), the next stage's split while the tensor cores work (after chunk 0's), then the wait
    // and the scale FMAs.
#pragma unroll
    for (int q = 0; q < QN; ++q) {
      if (k0 + q * TC::KC >= K) {
        if (!PRE && q == 0 && kt + 1 < KT) split(kt + 1);
        break;
      }
      uint32_t ra[2][TC::R];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint8_t* p = as + (wrow + g + 8 * h) * L::a_stride + q * TC::chunk_bytes + tig * TC::TB;
        uint32_t w[TC::TW];
        if constexpr (TC::TB == 16) {
          const uint4 v = *reinterpret_cast<const uint4*>(p);
          w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
        } else {
          w[0] = *reinterpret_cast<const uint32_t*>(p);
        }
        decode_a<F>(w, ra[h]);
      }
      float t[ND];
#pragma unroll
      for (int i = 0; i < ND; ++i) wgmma_hold(t[i]);
      wgmma_fence();
#pragma unroll
      for (int m = 0; m < TC::MMAS; ++m)
        Wgmma<N>::run(t, ra[0][2 * m], ra[1][2 * m], ra[0][2 * m + 1], ra[1][2 * m + 1],
                      wg_desc(bsm + (q * TC::KC + 16 * m) / 8 * 128), m > 0);
      wgmma_commit();
      if (!PRE && q == 0 && kt + 1 < KT) split(kt + 1);
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < ND; ++i) wgmma_hold(t[i]);
#pragma unroll
      for (int j = 0; j < N / 8; ++j) {
        acc[4 * j + 0] = fmaf(sc[q][0], t[4 * j + 0], acc[4 * j + 0]);
        acc[4 * j + 1] = fmaf(sc[q][0], t[4 * j + 1], acc[4 * j + 1]);
        acc[4 * j + 2] = fmaf(sc[q][1], t[4 * j + 2], acc[4 * j + 2]);
        acc[4 * j + 3] = fmaf(sc[q][1], t[4 * j + 3], acc[4 * j + 3]);
      }
    }
    if ((k0 + kBK) % kSliceCols == 0 || k0 + kBK >= K) {  // a slice ends with this stage
      const bool first = k0 < kSliceCols;
#pragma unroll
      for (int j = 0; j < T / 8; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          // part p of token tile j is n8 tile p T / 8 + j
          const float v = slice_value(acc[4 * j + r], acc[4 * (T / 8 + j) + r], acc[4 * (2 * T / 8 + j) + r]);
          ys(j, r) = first ? v : ys(j, r) + v;
        }
#pragma unroll
      for (int i = 0; i < ND; ++i) acc[i] = 0.0f;
    }
  }
  cp_async_wait<0>();
#pragma unroll
  for (int j = 0; j < T / 8; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t row = m0 + wrow + g + (r >= 2 ? 8 : 0);
      const int64_t tok = t0 + j * 8 + 2 * tig + (r & 1);
      if (row < M && tok < n) {
        float v = ys(j, r);
        if constexpr (F == WeightFormat::INT8_ROW) v = v * row_scale<F>(W, row);
        Y[tok * ldy + row] = v;
      }
    }
}

template <WeightFormat F, int T, bool PRE>
__global__ void __launch_bounds__(256, 1)
    large_wg_kernel(QMatrix W, const float* __restrict__ X, int64_t n, int64_t ldx, float* __restrict__ Y, int64_t ldy,
                    bool xvec, const uint8_t* __restrict__ parts) {
  extern __shared__ __align__(16) uint8_t smem[];
  large_tile_wg<F, T, PRE>(W, X, n, ldx, Y, ldy, xvec, int64_t(blockIdx.x) * kBM, int64_t(blockIdx.y) * T, parts, smem);
}

// PRE: every problem's X is a run of rows of the matrix at x_base (row stride: the problem's ldx),
// whose parts (row for row) are at `parts`.
template <WeightFormat F, int T, bool PRE>
__global__ void __launch_bounds__(256, 1) grouped_large_wg_kernel(const MatmulProblem* __restrict__ problems,
                                                                  const float* x_base, const uint8_t* parts) {
  extern __shared__ __align__(16) uint8_t smem[];
  const MatmulProblem p = problems[blockIdx.z];
  const int64_t m0 = int64_t(blockIdx.x) * kBM, t0 = int64_t(blockIdx.y) * T;
  if (m0 >= p.W.rows || t0 >= p.n) return;  // whole block: uniform
  const uint8_t* pp = nullptr;
  if constexpr (PRE) pp = parts + ((p.X - x_base) / p.ldx) * ((p.W.cols + kBK - 1) / kBK) * kPartsRow;
  large_tile_wg<F, T, PRE>(p.W, p.X, p.n, p.ldx, p.Y, p.ldy, p.xvec, m0, t0, pp, smem);
}

template <WeightFormat F, int TT, bool DB>
__global__ void __launch_bounds__(DB ? LargeDb<F, TT>::threads : kLargeThreads, 1)
    large_kernel(QMatrix W, const float* __restrict__ X, int64_t n, int64_t ldx, float* __restrict__ Y, int64_t ldy,
                 bool xvec) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int64_t m0 = int64_t(blockIdx.x) * kBM, t0 = int64_t(blockIdx.y) * Large<F, TT>::BN;
  if constexpr (DB)
    large_tile_db<F, TT>(W, X, n, ldx, Y, ldy, xvec, m0, t0, smem);
  else
    large_tile<F, TT>(W, X, n, ldx, Y, ldy, xvec, m0, t0, smem);
}

template <WeightFormat F, int TT, bool DB>
__global__ void __launch_bounds__(DB ? LargeDb<F, TT>::threads : kLargeThreads, 1)
    grouped_large_kernel(const MatmulProblem* __restrict__ problems) {
  extern __shared__ __align__(16) uint8_t smem[];
  const MatmulProblem p = problems[blockIdx.z];
  const int64_t m0 = int64_t(blockIdx.x) * kBM, t0 = int64_t(blockIdx.y) * Large<F, TT>::BN;
  if (m0 >= p.W.rows || t0 >= p.n) return;  // whole block: uniform
  if constexpr (DB)
    large_tile_db<F, TT>(p.W, p.X, p.n, p.ldx, p.Y, p.ldy, p.xvec, m0, t0, smem);
  else
    large_tile<F, TT>(p.W, p.X, p.n, p.ldx, p.Y, p.ldy, p.xvec, m0, t0, smem);
}

// ---- launchers

bool tensor_cores_on = [] {
  const char* e = std::getenv("SLUICE_CUDA_TENSOR_CORES");
  return !(e && std::strcmp(e, "0") == 0);
}();

// The small-n kernel for 1-8 rows: 1 streaming, 0 round by round, 2 (the default) chosen by the
// matrix's shape; SLUICE_CUDA_STREAM_SMALL=0/1 starts with one forced. The same bits either way
// (the tests compare them, the benchmark their rates). Measured on an H100 (2026-12-05, bench
// --kernels --device cuda, 7168 x 16384): matvec GB/s streaming vs round-by-round bf16 2049/1751,
// fp8 1448/1269, int8 1491/1245, mxfp4 654/615, int4 696/715. The streaming kernel gives each
// block 16 or 32 rows and all the columns, so fewer rows leave SMs idle: at 2048-4096 rows the
// round kernel (which also splits the columns) took 16-33% less time (bench/cuda_tc_harness.cu,
// H100, 2026-12-07), at 7168 rows it was even or slower. Auto streams from 3 x 16 rows per SM.
int stream_small_mode = [] {
  const char* e = std::getenv("SLUICE_CUDA_STREAM_SMALL");
  return e && std::strcmp(e, "0") == 0 ? 0 : e && std::strcmp(e, "1") == 0 ? 1 : 2;
}();
int sm_count() {
  static const int n = [] {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev))
      return 0;
    return sms;
  }();
  return n;
}
bool stream_small_for(int64_t rows) {
  return stream_small_mode == 2 ? rows >= int64_t(48) * sm_count() : stream_small_mode == 1;
}

// The large-n kernel: 2 the warpgroup-MMA large_tile_wg (the default where it can run), 1 the
// pipelined large_tile_db (elsewhere), SLUICE_CUDA_TC_LARGE=0 the first one, large_tile (two
// barriers a stage, 8 warps). The tests compare their bits, the benchmark their rates.
// Whether the warpgroup-MMA kernel can run: built for sm_90a (SLUICE_CUDA_SM90A) and the device
// is a Hopper (compute capability 9.0), checked once per process.
bool wg_available() {
#if defined(SLUICE_CUDA_SM90A)
  static const bool ok = compute_capability() == 90;
  return ok;
#else
  return false;
#endif
}

// 2: the warpgroup-MMA kernel where wg_available() (the default), 3: the same on activations split
// once per product (split_parts_kernel; where no memory is left for the parts, 2), 1: the pipelined
// mma.sync one (the default elsewhere), 0: the first. SLUICE_CUDA_TC_LARGE=0..3 starts with that one. All give
// the same bits. Measured on an H100 (bench/cuda_tc_harness.cu, 512 tokens, 2026-12-07, TFLOP/s,
// pipelined / warpgroup): int4 7168 x 16384 45.4 / 53.3, 4096 x 18432 52.4 / 61.6; mxfp4 7168 x
// 16384 43.2 / 54.3; fp8 50.1 / 62.0; int8 50.3 / 67.7; bf16 4096 x 18432 52.4 / 70.2 (its first
// version, with bank conflicts in the split, had run 0.83-0.87x the pipelined one).
int large_variant_asked = [] {
  const char* e = std::getenv("SLUICE_CUDA_TC_LARGE");
  return e ? std::atoi(e) : 2;
}();
int large_variant() {
  const int v = large_variant_asked;
  return v == 0 ? 0 : v == 1 || !wg_available() ? 1 : v == 2 ? 2 : 3;
}

bool x_aligned(const float* X, int64_t n, int64_t ldx) {
  return reinterpret_cast<uintptr_t>(X) % 16 == 0 && (n == 1 || ldx % 4 == 0);
}

template <class Kernel>
int prepare_smem(Kernel k, int bytes) {
  return int(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// 16-row tiles per streaming block: two where the activations' parts cost as much as the weights'
// decoding (4-bit formats; the fewer blocks still fill the GPU), else one.
// SLUICE_CUDA_STREAM_RT=1 or 2 forces one (benchmarks).
int stream_rt_forced = [] {
  const char* e = std::getenv("SLUICE_CUDA_STREAM_RT");
  return e ? std::atoi(e) : 0;
}();
template <WeightFormat F>
int stream_rt() {
  if (stream_rt_forced == 1 || stream_rt_forced == 2) return stream_rt_forced;
  return Tc<F>::nibble ? 2 : 1;
}

template <WeightFormat F, int NT, int RT>
bool launch_stream(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy, cudaStream_t s) {
  static const int attr = prepare_smem(stream_kernel<F, NT, RT>, kStreamSmemLimit);
  const int bytes = stream_smem_bytes(RT, (W.cols + kSliceCols - 1) / kSliceCols, n);
  if (attr != 0 || bytes > kStreamSmemLimit) return false;
  stream_kernel<F, NT, RT><<<unsigned((W.rows + 16 * RT - 1) / (16 * RT)), kStreamWarps * 32, bytes, s>>>(
      W, X, n, ldx, Y, ldy, x_aligned(X, n, ldx));
  return true;
}

// The streaming kernel where its shared memory fits (columns up to ~60k at 8 tokens), else the
// round-by-round one: the same bits either way.
template <WeightFormat F, int NT>
void launch_small(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy, cudaStream_t s) {
  if (stream_small_for(W.rows) && (stream_rt<F>() == 2 ? launch_stream<F, NT, 2>(W, X, n, ldx, Y, ldy, s)
                                              : launch_stream<F, NT, 1>(W, X, n, ldx, Y, ldy, s)))
    return;
  const int64_t tiles = (W.rows + 15) / 16, per_block = kSmallWarps / small_warps_per_tile(W.cols);
  small_kernel<F, NT><<<unsigned((tiles + per_block - 1) / per_block), kSmallWarps * 32, 0, s>>>(
      W, X, n, ldx, Y, ldy, x_aligned(X, n, ldx));
}

template <WeightFormat F, int TT, bool DB>
int launch_large_as(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy, cudaStream_t s) {
  constexpr int bytes = DB ? LargeDb<F, TT>::smem : Large<F, TT>::smem;
  static const int attr = prepare_smem(large_kernel<F, TT, DB>, bytes);
  if (attr) return attr;
  const dim3 grid(unsigned((W.rows + kBM - 1) / kBM), unsigned((n + Large<F, TT>::BN - 1) / Large<F, TT>::BN));
  constexpr int threads = DB ? LargeDb<F, TT>::threads : kLargeThreads;
  large_kernel<F, TT, DB><<<grid, threads, bytes, s>>>(W, X, n, ldx, Y, ldy, x_aligned(X, n, ldx));
  return 0;
}

// The parts of X's n rows (K columns) in memory from the stream's pool (nullptr where it has none
// to give: the caller then splits in the kernel), freed in stream order after the product.
template <WeightFormat F>
uint8_t* presplit(const float* X, int64_t n, int64_t ldx, int64_t K, cudaStream_t s) {
  const int64_t KT = (K + kBK - 1) / kBK;
  void* p = nullptr;
  if (cudaMallocAsync(&p, size_t(n * KT * kPartsRow), s) != cudaSuccess) {
    cudaGetLastError();  // not sticky: the product goes on without it
    return nullptr;
  }
  constexpr int per_t = (kBK / Tc<F>::KC) * Tc<F>::MMAS;
  split_parts_kernel<F><<<dim3(unsigned(KT), unsigned((n * per_t + 255) / 256)), 256, 0, s>>>(
      X, n, ldx, K, static_cast<uint8_t*>(p));
  return static_cast<uint8_t*>(p);
}

template <WeightFormat F, int T, bool PRE>
int launch_large_wg_as(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy,
                       const uint8_t* parts, cudaStream_t s) {
  constexpr int bytes = LargeWg<F, T, PRE>::smem;
  static const int attr = prepare_smem(large_wg_kernel<F, T, PRE>, bytes);
  if (attr) return attr;
  const dim3 grid(unsigned((W.rows + kBM - 1) / kBM), unsigned((n + T - 1) / T));
  large_wg_kernel<F, T, PRE>
      <<<grid, LargeWg<F, T, PRE>::threads, bytes, s>>>(W, X, n, ldx, Y, ldy, x_aligned(X, n, ldx), parts);
  return 0;
}

template <WeightFormat F, int T>
int launch_large_wg(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy, bool pre,
                    cudaStream_t s) {
  uint8_t* parts = pre ? presplit<F>(X, n, ldx, W.cols, s) : nullptr;
  if (!parts) return launch_large_wg_as<F, T, false>(W, X, n, ldx, Y, ldy, nullptr, s);
  const int e = launch_large_wg_as<F, T, true>(W, X, n, ldx, Y, ldy, parts, s);
  cudaFreeAsync(parts, s);
  return e;
}

template <WeightFormat F, int TT>
int launch_large(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy, cudaStream_t s) {
  switch (large_variant()) {
    case 0: return launch_large_as<F, TT, false>(W, X, n, ldx, Y, ldy, s);
    case 1: return launch_large_as<F, TT, true>(W, X, n, ldx, Y, ldy, s);
    case 2: return launch_large_wg<F, 16 * TT>(W, X, n, ldx, Y, ldy, false, s);
    default: return launch_large_wg<F, 16 * TT>(W, X, n, ldx, Y, ldy, true, s);
  }
}

template <WeightFormat F>
int launch_tc(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy, cudaStream_t s) {
  int e = 0;
  if (n <= 2)
    launch_small<F, 1>(W, X, n, ldx, Y, ldy, s);
  else if (n <= 5)
    launch_small<F, 2>(W, X, n, ldx, Y, ldy, s);
  else if (n <= 8)
    launch_small<F, 3>(W, X, n, ldx, Y, ldy, s);
  else if (n <= 16)
    e = launch_large<F, 1>(W, X, n, ldx, Y, ldy, s);
  else if (n <= 32)
    e = launch_large<F, 2>(W, X, n, ldx, Y, ldy, s);
  else
    e = launch_large<F, 4>(W, X, n, ldx, Y, ldy, s);
  return e ? e : int(cudaGetLastError());
}

template <WeightFormat F, int NT, int RT>
bool launch_grouped_stream(const MatmulProblem* dev, int count, int64_t max_rows, int64_t cols, int64_t max_n,
                           cudaStream_t s) {
  static const int attr = prepare_smem(grouped_stream_kernel<F, NT, RT>, kStreamSmemLimit);
  const int bytes = stream_smem_bytes(RT, (cols + kSliceCols - 1) / kSliceCols, max_n);
  if (attr != 0 || bytes > kStreamSmemLimit) return false;
  const dim3 grid(unsigned((max_rows + 16 * RT - 1) / (16 * RT)), unsigned(count));
  grouped_stream_kernel<F, NT, RT><<<grid, kStreamWarps * 32, bytes, s>>>(dev);
  return true;
}

template <WeightFormat F, int NT>
void launch_grouped_small(const MatmulProblem* dev, int count, int64_t max_rows, int64_t cols, int64_t max_n,
                          cudaStream_t s) {
  if (stream_small_mode != 0 && (stream_rt<F>() == 2 ? launch_grouped_stream<F, NT, 2>(dev, count, max_rows, cols, max_n, s)
                                              : launch_grouped_stream<F, NT, 1>(dev, count, max_rows, cols, max_n, s)))
    return;
  const int64_t tiles = (max_rows + 15) / 16, per_block = kSmallWarps / small_warps_per_tile(cols);
  const dim3 grid(unsigned((tiles + per_block - 1) / per_block), unsigned(count));
  grouped_small_kernel<F, NT><<<grid, kSmallWarps * 32, 0, s>>>(dev);
}

template <WeightFormat F, int TT, bool DB>
int launch_grouped_large_as(const MatmulProblem* dev, int count, int64_t max_rows, int64_t max_n, cudaStream_t s) {
  constexpr int bytes = DB ? LargeDb<F, TT>::smem : Large<F, TT>::smem;
  static const int attr = prepare_smem(grouped_large_kernel<F, TT, DB>, bytes);
  if (attr) return attr;
  const dim3 grid(unsigned((max_rows + kBM - 1) / kBM), unsigned((max_n + Large<F, TT>::BN - 1) / Large<F, TT>::BN),
                  unsigned(count));
  constexpr int threads = DB ? LargeDb<F, TT>::threads : kLargeThreads;
  grouped_large_kernel<F, TT, DB><<<grid, threads, bytes, s>>>(dev);
  return 0;
}

template <WeightFormat F, int T, bool PRE>
int launch_grouped_large_wg_as(const MatmulProblem* dev, int count, int64_t max_rows, int64_t max_n,
                               const float* x_base, const uint8_t* parts, cudaStream_t s) {
  constexpr int bytes = LargeWg<F, T, PRE>::smem;
  static const int attr = prepare_smem(grouped_large_wg_kernel<F, T, PRE>, bytes);
  if (attr) return attr;
  const dim3 grid(unsigned((max_rows + kBM - 1) / kBM), unsigned((max_n + T - 1) / T), unsigned(count));
  grouped_large_wg_kernel<F, T, PRE><<<grid, LargeWg<F, T, PRE>::threads, bytes, s>>>(dev, x_base, parts);
  return 0;
}

template <WeightFormat F, int T>
int launch_grouped_large_wg(const MatmulProblem* dev, int count, int64_t max_rows, int64_t cols, int64_t max_n,
                            const SharedRows& x, bool pre, cudaStream_t s) {
  uint8_t* parts = pre && x.base ? presplit<F>(x.base, x.rows, x.ld, cols, s) : nullptr;
  if (!parts) return launch_grouped_large_wg_as<F, T, false>(dev, count, max_rows, max_n, nullptr, nullptr, s);
  const int e = launch_grouped_large_wg_as<F, T, true>(dev, count, max_rows, max_n, x.base, parts, s);
  cudaFreeAsync(parts, s);
  return e;
}

template <WeightFormat F, int TT>
int launch_grouped_large(const MatmulProblem* dev, int count, int64_t max_rows, int64_t cols, int64_t max_n,
                         const SharedRows& x, cudaStream_t s) {
  switch (large_variant()) {
    case 0: return launch_grouped_large_as<F, TT, false>(dev, count, max_rows, max_n, s);
    case 1: return launch_grouped_large_as<F, TT, true>(dev, count, max_rows, max_n, s);
    case 2: return launch_grouped_large_wg<F, 16 * TT>(dev, count, max_rows, cols, max_n, x, false, s);
    default: return launch_grouped_large_wg<F, 16 * TT>(dev, count, max_rows, cols, max_n, x, true, s);
  }
}

template <WeightFormat F>
int launch_grouped_tc(const MatmulProblem* dev, int count, int64_t max_rows, int64_t cols, int64_t max_n,
                      const SharedRows& x, cudaStream_t s) {
  int e = 0;
  if (max_n <= 2)
    launch_grouped_small<F, 1>(dev, count, max_rows, cols, max_n, s);
  else if (max_n <= 5)
    launch_grouped_small<F, 2>(dev, count, max_rows, cols, max_n, s);
  else if (max_n <= 8)
    launch_grouped_small<F, 3>(dev, count, max_rows, cols, max_n, s);
  else if (max_n <= 16)
    e = launch_grouped_large<F, 1>(dev, count, max_rows, cols, max_n, x, s);
  else if (max_n <= 32)
    e = launch_grouped_large<F, 2>(dev, count, max_rows, cols, max_n, x, s);
  else
    e = launch_grouped_large<F, 4>(dev, count, max_rows, cols, max_n, x, s);
  return e ? e : int(cudaGetLastError());
}

// ---- the probe of the tensor cores' element independence (tests)

__global__ void mma_probe_kernel(const uint16_t* A, const uint16_t* B, const float* C, float* D, int count) {
  const int w = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (w >= count) return;
  const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const uint16_t* a = A + w * 256;
  const uint16_t* b = B + w * 128;
  auto pa = [&](int r, int k) { return uint32_t(a[r * 16 + k]) | uint32_t(a[r * 16 + k + 1]) << 16; };
  auto pb = [&](int c, int k) { return uint32_t(b[c * 16 + k]) | uint32_t(b[c * 16 + k + 1]) << 16; };
  float d[4] = {C[w * 128 + g * 8 + 2 * tig], C[w * 128 + g * 8 + 2 * tig + 1], C[w * 128 + (g + 8) * 8 + 2 * tig],
                C[w * 128 + (g + 8) * 8 + 2 * tig + 1]};
  mma_bf16(d, pa(g, 2 * tig), pa(g + 8, 2 * tig), pa(g, 2 * tig + 8), pa(g + 8, 2 * tig + 8), pb(g, 2 * tig),
           pb(g, 2 * tig + 8));
  D[w * 128 + g * 8 + 2 * tig] = d[0];
  D[w * 128 + g * 8 + 2 * tig + 1] = d[1];
  D[w * 128 + (g + 8) * 8 + 2 * tig] = d[2];
  D[w * 128 + (g + 8) * 8 + 2 * tig + 1] = d[3];
}

// Independent MMA chains for the rate probe (inputs from registers, so only the tensor cores run).
__global__ void mma_rate_kernel(int iters, float* out) {
  uint32_t a = 0x3F803F80u ^ threadIdx.x, b = 0x3F803F80u + blockIdx.x;
  float acc[8][4] = {};
  for (int i = 0; i < iters; ++i)
#pragma unroll
    for (int c = 0; c < 8; ++c) mma_bf16(acc[c], a, a ^ c, b, a, b, b ^ c);
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < 8; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  if (s == 1.2345f) out[0] = s;  // keeps the loop
}

}  // namespace

bool tc_eligible(const QMatrix& W) {
  if (!tensor_cores_on || W.rows <= 0 || W.row_bytes % 16 != 0) return false;
  switch (W.fmt) {
    case WeightFormat::BF16: return W.cols % 32 == 0;
    case WeightFormat::FP8_E4M3_BLOCK: return W.cols % 64 == 0 && W.block % 64 == 0;
    case WeightFormat::INT8_ROW: return W.cols % 64 == 0;
    case WeightFormat::INT4_GROUP: return W.cols % 32 == 0 && W.group % 32 == 0;
    case WeightFormat::MXFP4: return W.cols % 32 == 0;
    case WeightFormat::F32:
    case WeightFormat::F16: return false;
  }
  return false;
}

void set_tensor_core_products(bool on) { tensor_cores_on = on; }

void set_streaming_small_products(int mode) { stream_small_mode = mode; }

void set_streaming_small_tiles(int rt) { stream_rt_forced = rt; }

void set_large_products_variant(int v) { large_variant_asked = v; }

int large_products_variant() { return large_variant(); }

int tc_matmul(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy, Stream s) {
  if (n <= 0 || W.rows <= 0) return 0;
  if (reinterpret_cast<uintptr_t>(W.data) % 16 != 0) return int(cudaErrorMisalignedAddress);
  const cudaStream_t st = cudaStream_t(s);
  switch (W.fmt) {
    case WeightFormat::BF16: return launch_tc<WeightFormat::BF16>(W, X, n, ldx, Y, ldy, st);
    case WeightFormat::FP8_E4M3_BLOCK: return launch_tc<WeightFormat::FP8_E4M3_BLOCK>(W, X, n, ldx, Y, ldy, st);
    case WeightFormat::INT8_ROW: return launch_tc<WeightFormat::INT8_ROW>(W, X, n, ldx, Y, ldy, st);
    case WeightFormat::INT4_GROUP: return launch_tc<WeightFormat::INT4_GROUP>(W, X, n, ldx, Y, ldy, st);
    case WeightFormat::MXFP4: return launch_tc<WeightFormat::MXFP4>(W, X, n, ldx, Y, ldy, st);
    default: return int(cudaErrorInvalidValue);
  }
}

int tc_grouped_matmul(WeightFormat fmt, const MatmulProblem* dev, int count, int64_t max_rows, int64_t cols,
                      int64_t max_n, Stream s, const SharedRows& x) {
  if (count <= 0 || max_rows <= 0 || max_n <= 0) return 0;
  const cudaStream_t st = cudaStream_t(s);
  switch (fmt) {
    case WeightFormat::BF16: return launch_grouped_tc<WeightFormat::BF16>(dev, count, max_rows, cols, max_n, x, st);
    case WeightFormat::FP8_E4M3_BLOCK:
      return launch_grouped_tc<WeightFormat::FP8_E4M3_BLOCK>(dev, count, max_rows, cols, max_n, x, st);
    case WeightFormat::INT8_ROW: return launch_grouped_tc<WeightFormat::INT8_ROW>(dev, count, max_rows, cols, max_n, x, st);
    case WeightFormat::INT4_GROUP:
      return launch_grouped_tc<WeightFormat::INT4_GROUP>(dev, count, max_rows, cols, max_n, x, st);
    case WeightFormat::MXFP4: return launch_grouped_tc<WeightFormat::MXFP4>(dev, count, max_rows, cols, max_n, x, st);
    default: return int(cudaErrorInvalidValue);
  }
}

int compute_capability() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev))
    return 0;
  return major * 10 + minor;
}

int mma_probe(const uint16_t* A, const uint16_t* B, const float* C, float* D, int count) {
  if (count <= 0) return 0;
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return int(e);
  mma_probe_kernel<<<unsigned((count + 3) / 4), 128>>>(A, B, C, D, count);
  e = cudaGetLastError();
  return int(e != cudaSuccess ? e : cudaDeviceSynchronize());
}

double mma_rate_tflops() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev))
    return 0;
  float* out = nullptr;
  cudaEvent_t e0, e1;
  if (cudaMalloc(&out, 4) != cudaSuccess) return 0;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const int blocks = sms * 4, threads = 256, iters = 4096;
  mma_rate_kernel<<<blocks, threads>>>(64, out);  // warm-up
  cudaEventRecord(e0);
  mma_rate_kernel<<<blocks, threads>>>(iters, out);
  cudaEventRecord(e1);
  float ms = 0;
  const bool ok = cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(out);
  if (!ok || ms <= 0) return 0;
  const double flop = double(blocks) * (threads / 32) * iters * 8 * 2.0 * 16 * 8 * 16;
  return flop / (ms * 1e-3) / 1e12;
}

}  // namespace sluice::cuda
