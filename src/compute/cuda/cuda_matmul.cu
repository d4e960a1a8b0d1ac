// Fused dequantise + product for every stored weight format, and the embedding
// lookup. One warp computes one to eight output rows (max_rows_per_warp): each
// lane takes groups of 8 values of each weight row (4 for f32; 16, 8 or 4 bytes by format, see Group below),
// decodes them exactly in registers and accumulates in f32 against up to kTile
// activation rows; the 32 lane sums meet in a fixed shuffle tree. The order of
// every addition depends only on (weight row, activation row), so results are
// bit-identical whatever the number of activation rows.
//
// Own kernels rather than cuBLAS: cuBLAS chooses algorithms (and split-K
// reductions) by shape, so one token and a verification batch would round
// differently; and the quantized formats need fused decoding anyway.
//
// These are the CUDA-core products: F32 and F16 weights, and matrices of the other formats whose
// shape the tensor-core products (cuda_matmul_tc.cu, tc_eligible) do not take; matmul() and
// grouped_matmul() send the rest there.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>

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

// Weight rows per warp: a lane decodes the same group of R rows and multiplies each decoded group
// by one load of the activations, so the activation traffic through L1 per weight byte falls by R.
// With one row per warp the 4-bit products moved 8 activation bytes per weight byte and were bound
// by L1 wavefronts (~0.56-0.82 TB/s on an H200). R never changes a result: every output is still
// one lane chain per (weight row, activation row) and the same shuffle tree.
template <WeightFormat F, int Tile>
constexpr int max_rows_per_warp() {
  // Measured on an H200 (sluice bench --kernels --device cuda, every R forced in turn): with one
  // activation row the 4-bit integers gain up to 4 rows (772 -> 1091 GB/s), bf16, fp8, int8 and
  // mxfp4 peak at 2, f16 and f32 at 1; with a tile
  // of activation rows 4 rows double the batched rates (f32 2).
  if constexpr (F == WeightFormat::F32) return Tile == 1 ? 1 : 2;
  if constexpr (Tile > 1) return 4;
  if constexpr (F == WeightFormat::INT4_GROUP) return 4;
  if constexpr (F == WeightFormat::F16) return 1;
  return 2;
}

// Output rows r0 .. r0 + R - 1 (those below W.rows) of Y = W X for n activation rows: the one
// definition every product kernel uses. Tile activation rows share each pass over the weight rows
// (1 for a single row: fewer registers, more warps in flight). For each output, a lane adds its
// groups g = lane, lane + 32, ... in order, each group's values in column order, then the tail
// columns (one lane), then the 32 lane sums meet in a fixed shuffle tree: the additions depend on
// neither n, Tile nor R.
template <WeightFormat F, int Tile, int R>
__device__ __forceinline__ void matmul_rows(const QMatrix& W, const float* __restrict__ X, int64_t n, int64_t ldx,
                                            float* __restrict__ Y, int64_t ldy, bool aligned, bool xvec, int64_t r0) {
  constexpr int G = Group<F>::values;
  constexpr int U = Group<F>::unroll / R > 0 ? Group<F>::unroll / R : 1;  // ~64 bytes in flight per lane
  const int lane = threadIdx.x & 31;
  const int nrows = int(W.rows - r0 < R ? W.rows - r0 : R);
  // Row j of the warp (rows past the end repeat the last row: loads stay in bounds, results
  // are not stored), its bytes and its absolute index; computed where used (fewer live registers).
  const auto row_of = [&](int j) { return r0 + (j < nrows ? j : nrows - 1); };
  const auto bytes_of = [&](int j) { return W.data + row_of(j) * W.row_bytes; };
  const int64_t groups = W.cols / G;         // full groups
  const int64_t tail0 = groups * G;          // columns past them, done by the lane next in turn
  const int tail_lane = int(groups % 32);
  for (int64_t i0 = 0; i0 < n; i0 += Tile) {
    const int nb = int(n - i0 < Tile ? n - i0 : Tile);
    float acc[R][Tile];
#pragma unroll
    for (int j = 0; j < R; ++j)
#pragma unroll
      for (int i = 0; i < Tile; ++i) acc[j][i] = 0.0f;
    // U groups of every row are loaded before the first is used (more bytes in flight per
    // lane); the additions stay in group order, as one group at a time.
    for (int64_t g0 = lane; g0 < groups; g0 += 32 * U) {
      uint32_t words[U][R][Group<F>::words];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (g0 + 32 * u < groups)
#pragma unroll
          for (int j = 0; j < R; ++j) load_group<Group<F>::bytes>(bytes_of(j), g0 + 32 * u, aligned, words[u][j]);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t g = g0 + 32 * u;
        if (g < groups && Tile == 1) {
          // One activation row: each row's group is decoded and used at once (fewer live registers).
          float x[G];
          load_x<G>(X + i0 * ldx + g * G, xvec, x);
#pragma unroll
          for (int j = 0; j < R; ++j) {
            float w[G];
            decode_group<F>(W, W.row0 + row_of(j), g, words[u][j], w);
#pragma unroll
            for (int k = 0; k < G; ++k) acc[j][0] = fmaf(w[k], x[k], acc[j][0]);
          }
        } else if (g < groups) {
          float w[R][G];
#pragma unroll
          for (int j = 0; j < R; ++j) decode_group<F>(W, W.row0 + row_of(j), g, words[u][j], w[j]);
#pragma unroll
          for (int i = 0; i < Tile; ++i) {
            if (i < nb) {
              float x[G];
              load_x<G>(X + (i0 + i) * ldx + g * G, xvec, x);
#pragma unroll
              for (int j = 0; j < R; ++j)
#pragma unroll
                for (int k = 0; k < G; ++k) acc[j][i] = fmaf(w[j][k], x[k], acc[j][i]);
            }
          }
        }
      }
    }
    if (lane == tail_lane && tail0 < W.cols)
#pragma unroll
      for (int j = 0; j < R; ++j)
        for (int64_t c = tail0; c < W.cols; ++c) {
          const float wv = decode_elem(W, row_of(j), c);
          for (int i = 0; i < nb; ++i) acc[j][i] = fmaf(wv, X[(i0 + i) * ldx + c], acc[j][i]);
        }
#pragma unroll
    for (int j = 0; j < R; ++j)
#pragma unroll
      for (int i = 0; i < Tile; ++i) {
        float v = acc[j][i];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0 && i < nb && j < nrows) Y[(i0 + i) * ldy + r0 + j] = v;
      }
  }
}

template <WeightFormat F, int Tile, int R>
__global__ void __launch_bounds__(kWarps * 32)
    matmul_kernel(QMatrix W, const float* __restrict__ X, int64_t n, int64_t ldx, float* __restrict__ Y, int64_t ldy,
                  bool aligned, bool xvec) {
  const int64_t r0 = (int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * R;
  if (r0 >= W.rows) return;
  matmul_rows<F, Tile, R>(W, X, n, ldx, Y, ldy, aligned, xvec, r0);
}

// One launch for several products of one format: blockIdx.y picks the product.
template <WeightFormat F, int Tile, int R>
__global__ void __launch_bounds__(kWarps * 32) grouped_matmul_kernel(const MatmulProblem* __restrict__ problems) {
  const MatmulProblem p = problems[blockIdx.y];
  const int64_t r0 = (int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * R;
  if (r0 >= p.W.rows || p.n <= 0) return;
  matmul_rows<F, Tile, R>(p.W, p.X, p.n, p.ldx, p.Y, p.ldy, p.aligned, p.xvec, r0);
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

// Several rows per warp only where the launch still fills the GPU: a small product (a 576-row
// projection) takes fewer rows per warp and so keeps more warps in flight. Every choice gives the
// same bits. SLUICE_CUDA_ROWS_PER_WARP=1|2|4|8 replaces the format's default (for measuring it).
int multiprocessors() {
  static const int count = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 132;
    return n;
  }();
  return count;
}
int forced_rows_per_warp() {
  static const int forced = [] {
    const char* e = std::getenv("SLUICE_CUDA_ROWS_PER_WARP");
    if (!e || !*e) return 0;
    const std::string v(e);
    if (v == "1" || v == "2" || v == "4" || v == "8") return std::stoi(v);
    std::fprintf(stderr, "sluice: SLUICE_CUDA_ROWS_PER_WARP=%s is not 1, 2, 4 or 8; using the defaults\n", e);
    return 0;
  }();
  return forced;
}
template <WeightFormat F, int Tile>
int rows_per_warp(int64_t rows, int64_t count) {
  int R = forced_rows_per_warp() ? forced_rows_per_warp() : max_rows_per_warp<F, Tile>();
  while (R > 1 && (rows + int64_t(kWarps) * R - 1) / (int64_t(kWarps) * R) * count < 2 * int64_t(multiprocessors()))
    R /= 2;
  return R;
}

template <WeightFormat F, int Tile, int R>
void launch_matmul_rows(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy, bool aligned,
                        bool xvec, cudaStream_t s) {
  const unsigned blocks = unsigned((W.rows + kWarps * R - 1) / (kWarps * R));
  matmul_kernel<F, Tile, R><<<blocks, kWarps * 32, 0, s>>>(W, X, n, ldx, Y, ldy, aligned, xvec);
}
template <WeightFormat F, int Tile>
void launch_matmul_tile(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy,
                        bool aligned, bool xvec, cudaStream_t s) {
  switch (rows_per_warp<F, Tile>(W.rows, 1)) {
    case 8: return launch_matmul_rows<F, Tile, 8>(W, X, n, ldx, Y, ldy, aligned, xvec, s);
    case 4: return launch_matmul_rows<F, Tile, 4>(W, X, n, ldx, Y, ldy, aligned, xvec, s);
    case 2: return launch_matmul_rows<F, Tile, 2>(W, X, n, ldx, Y, ldy, aligned, xvec, s);
    default: return launch_matmul_rows<F, Tile, 1>(W, X, n, ldx, Y, ldy, aligned, xvec, s);
  }
}

template <WeightFormat F>
int launch_matmul(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy, Stream s) {
  const bool aligned = weight_aligned(W);
  const bool xvec = x_vectorisable(X, n, ldx);
  if (n == 1)
    launch_matmul_tile<F, 1>(W, X, n, ldx, Y, ldy, aligned, xvec, cudaStream_t(s));
  else
    launch_matmul_tile<F, kTile>(W, X, n, ldx, Y, ldy, aligned, xvec, cudaStream_t(s));
  return int(cudaGetLastError());
}

template <WeightFormat F, int Tile, int R>
void launch_grouped_rows(const MatmulProblem* dev, int count, int64_t max_rows, cudaStream_t s) {
  const dim3 grid(unsigned((max_rows + kWarps * R - 1) / (kWarps * R)), unsigned(count));
  grouped_matmul_kernel<F, Tile, R><<<grid, kWarps * 32, 0, s>>>(dev);
}
template <WeightFormat F, int Tile>
void launch_grouped_tile(const MatmulProblem* dev, int count, int64_t max_rows, cudaStream_t s) {
  switch (rows_per_warp<F, Tile>(max_rows, count)) {
    case 8: return launch_grouped_rows<F, Tile, 8>(dev, count, max_rows, s);
    case 4: return launch_grouped_rows<F, Tile, 4>(dev, count, max_rows, s);
    case 2: return launch_grouped_rows<F, Tile, 2>(dev, count, max_rows, s);
    default: return launch_grouped_rows<F, Tile, 1>(dev, count, max_rows, s);
  }
}

template <WeightFormat F>
int launch_grouped(const MatmulProblem* dev, int count, int64_t max_rows, int64_t max_n, Stream s) {
  if (max_n == 1)
    launch_grouped_tile<F, 1>(dev, count, max_rows, cudaStream_t(s));
  else
    launch_grouped_tile<F, kTile>(dev, count, max_rows, cudaStream_t(s));
  return int(cudaGetLastError());
}

}  // namespace

void prepare_problem(MatmulProblem& p) {
  p.aligned = weight_aligned(p.W);
  p.xvec = x_vectorisable(p.X, p.n, p.ldx);
}

int grouped_matmul(WeightFormat fmt, bool tensor_cores, const MatmulProblem* dev, int count, int64_t max_rows,
                   int64_t cols, int64_t max_n, Stream s, const SharedRows& x) {
  if (count <= 0 || max_rows <= 0) return 0;
  if (count > 65535) return int(cudaErrorInvalidValue);
  if (tensor_cores) return tc_grouped_matmul(fmt, dev, count, max_rows, cols, max_n, s, x);
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
  if (tc_eligible(W)) return tc_matmul(W, X, n, ldx, Y, ldy, s);
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
