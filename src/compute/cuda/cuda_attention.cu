// The CUDA backend's attention cores, following the CPU definitions in
// compute/cpu/cpu_attention.cpp: absorbed MLA over the latent cache, GQA with
// sinks and sliding windows, KDA's short convolution, decay gate and gated
// delta rule, and Block AttnRes mixing. GQA: one block per (query row, head):
// scores into scratch, a softmax with a double sum, then the weighted sum with
// one thread per output channel walking positions in order. MLA: the query
// against the latent, then attention in key tiles with an online softmax
// (below), then the output projection.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "compute/cuda/cuda_async_copy.cuh"
#include "compute/cuda/cuda_device_decode.cuh"
#include "compute/cuda/cuda_kernels.h"

namespace sluice::cuda {

namespace {

constexpr int kThreads = 256;

__device__ float block_max(float v, float* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = sh[0];
  __syncthreads();
  return r;
}

__device__ double block_sum(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}

// Warp dot product of a[0..n) and b[0..n), lanes strided, fixed tree; all lanes get it.
__device__ __forceinline__ float warp_dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = threadIdx.x & 31; i < n; i += 32) acc = fmaf(a[i], b[i], acc);
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  return acc;
}

// p[0..n) <- softmax(p) (max in f32, sum in double as ops::softmax).
__device__ void block_softmax(float* p, int64_t n, float* shf, double* shd) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) m = fmaxf(m, p[j]);
  m = block_max(m, shf);
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    const float e = expf(p[j] - m);
    p[j] = e;
    sum += e;
  }
  sum = block_sum(sum, shd);
  const float inv = float(1.0 / sum);
  __syncthreads();
  for (int64_t j = threadIdx.x; j < n; j += kThreads) p[j] *= inv;
  __syncthreads();
}

// ---- absorbed MLA, in five launches so a one-token step spreads over the GPU
// (one block per head left most of the SMs idle and walked 500+ positions per
// thread). Every value depends only on its own row t, head h and position, so
// a token alone and the same token inside a batch give the same bits.

constexpr int kColTile = 32;   // output columns per block (one warp's width)
constexpr int kSlices = 8;     // row slices per block, summed in a fixed tree

// out[c] = sum_j a[j] * M(j, c) for c in one 32-column tile: slice k of the
// block walks rows j = k, k+8, k+16, ... in order, then the eight partial sums
// are added as ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)).
template <class Load>
__device__ void weighted_row_sum(const float* a, int64_t rows, int64_t cols, Load load, float* out) {
  __shared__ float part[kSlices][kColTile];
  const int lane = threadIdx.x % kColTile, k = threadIdx.x / kColTile;
  const int64_t c = int64_t(blockIdx.x) * kColTile + lane;
  float acc = 0.0f;
  if (c < cols) {
#pragma unroll 4
    for (int64_t j = k; j < rows; j += kSlices) acc = fmaf(a[j], load(j, c), acc);
  }
  part[k][lane] = acc;
  __syncthreads();
  if (k == 0 && c < cols)
    out[c] = ((part[0][lane] + part[1][lane]) + (part[2][lane] + part[3][lane])) +
             ((part[4][lane] + part[5][lane]) + (part[6][lane] + part[7][lane]));
}

// q_abs[t, h, c] = sum_i q_nope[t, h, i] W_UK[h][i][c]: the query against the latent.
// grid (ceil(C/32), H, T)
__global__ void mla_qabs_kernel(MlaArgs a, int64_t t0) {
  const int64_t h = blockIdx.y, t = t0 + blockIdx.z;
  const float* qn = a.q + t * a.ldq + h * (a.N + a.R);
  const int64_t w0 = h * (a.N + a.V);
  const QMatrix& W = a.kv_b;
  weighted_row_sum(qn, a.N, a.C, [&](int64_t i, int64_t c) { return decode_elem(W, w0 + i, c); },
                   a.qabs + (t * a.H + h) * a.C);
}

// ---- absorbed MLA attention over the latent cache, flash-attention style (f32 on the CUDA cores).
// Rows are (query t, head h) pairs, row = t * H + h; every head reads the same latent rows, so a
// block of kSplitRows rows shares each key tile it loads (a one-token step: 96 heads in 3 blocks).
// The keys are cut at fixed absolute positions into splits of kSplitKeys, each into tiles of
// kTileKeys. A split of a row is computed alone: per tile the scores (q_abs . latent_j + q_rope .
// k_rope_j, one chain over the C + R columns in order) times the scale, then an online softmax
// (running max m, sum l, weighted sum of latent rows rescaled when m grows); its (m, l, sum) is
// the split's partial. A row's partials are folded in split order by fold() (from m = -inf, l = 0,
// sum = 0), then the sum is divided by l. Either a block computes one split and writes its partial
// for mla_combine_kernel (few rows: a one-token step spreads over the splits), or it goes through
// its rows' splits in order and folds as it goes (a prefill: no partials in memory); the two run
// the same operations per row. What a row gets depends only on its own values and the absolute
// positions: keys past its causal limit score -inf and leave m, l and the sum exactly as they were
// (a factor of exactly 1, terms of exactly 0), and splits past it are not folded, so a token alone,
// in a batch, in a chunk or in a span gives the same bits.
constexpr int kSplitRows = 32;
constexpr int kTileKeys = 64;
constexpr int64_t kSplitKeys = 128;
constexpr int kColChunk = 32;                // score columns staged in shared memory at a time
constexpr int kChunkStride = kColChunk + 4;  // floats per staged row: 16-byte rows, fragment loads in distinct banks
constexpr int kPsStride = kTileKeys + 4;
constexpr int kSplitThreads = 256;
constexpr int kLatentPerThread = 8;  // latent columns per thread: C <= 64 * 8
static_assert(kSplitThreads == 8 * kSplitRows, "8 warps x 4 rows for the softmax; 4 x 64 threads for the sum");

// Column c of row r's query against the cache row: q_abs for c < C, then q_rope.
__device__ __forceinline__ const float* split_query(const MlaArgs& a, int64_t r, int64_t c) {
  if (c < a.C) return a.qabs + r * a.C + c;
  const int64_t t = r / a.H, h = r - t * a.H;
  return a.q + t * a.ldq + h * (a.N + a.R) + a.N + (c - a.C);
}

// A split's partial (m, l, x) into the running (M, L, X): the factors, then each value. Explicitly
// rounded operations: the folding and the combining kernels must not be contracted differently.
struct Fold {
  float M, f, g;  // the new running max, the factor for the running values and for the split's
};
__device__ __forceinline__ Fold fold_factors(float M, float m) {
  const float Mn = fmaxf(M, m);
  return {Mn, M == Mn ? 1.0f : expf(__fsub_rn(M, Mn)), m == Mn ? 1.0f : expf(__fsub_rn(m, Mn))};
}
__device__ __forceinline__ float fold_value(float X, float x, const Fold& k) { return __fmaf_rn(X, k.f, __fmul_rn(x, k.g)); }

// Two buffers of staged score columns (the next chunk arrives while the threads take the current
// one), the tile's scores then probabilities, and the rows' softmax state.
struct __align__(16) SplitShared {
  float qs[2][kSplitRows][kChunkStride];
  float cs[2][kTileKeys][kChunkStride];
  float ps[kSplitRows][kPsStride];
  float ms[kSplitRows], ls[kSplitRows], cr[kSplitRows];
  float run_m[kSplitRows], run_l[kSplitRows];  // the folding kernel's running max and sum
};

// Whether every staged row piece of 4 columns is one aligned 16-byte copy (else 4-byte copies).
__device__ __forceinline__ bool split_vectors(const MlaArgs& a) {
  const auto al = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return (a.C & 3) == 0 && (a.R & 3) == 0 && (a.N & 3) == 0 && (a.ldq & 3) == 0 && (a.ldc & 3) == 0 && al(a.q) &&
         al(a.qabs) && al(a.cache);
}

// Enqueues columns c0 .. c0 + kColChunk - 1 of the block's query rows and of keys j0 .. j0 + 63
// into buffer b (zeros past the columns, the rows and kend), in pieces of W floats (4: one 16-byte
// copy each, where split_vectors holds; 1: element by element).
template <int W>
__device__ __forceinline__ void split_stage_pieces(const MlaArgs& a, SplitShared& sh, int b, int64_t r0, int64_t j0,
                                                   int64_t kend, int64_t c0) {
  constexpr int P = kColChunk / W;  // pieces per row
  const auto copy = [](float* dst, const float* src, bool in) {
    if constexpr (W == 4)
      cp_async16(dst, src, in ? 16 : 0);
    else
      cp_async4(dst, src, in ? 4 : 0);
  };
  const int64_t rows = a.T * a.H, K = a.C + a.R;
  for (int i = threadIdx.x; i < (kSplitRows + kTileKeys) * P; i += kSplitThreads) {
    const int r = i / P, c = (i % P) * W;
    if (r < kSplitRows) {
      const bool in = r0 + r < rows && c0 + c < K;
      copy(&sh.qs[b][r][c], in ? split_query(a, r0 + r, c0 + c) : a.qabs, in);
    } else {
      const int j = r - kSplitRows;
      const bool in = j0 + j < kend && c0 + c < K;
      copy(&sh.cs[b][j][c], in ? a.cache + (j0 + j) * a.ldc + c0 + c : a.cache, in);
    }
  }
}
__device__ __forceinline__ void split_stage(const MlaArgs& a, SplitShared& sh, int b, int64_t r0, int64_t j0,
                                            int64_t kend, int64_t c0, bool vec) {
  if (vec)
    split_stage_pieces<4>(a, sh, b, r0, j0, kend, c0);
  else
    split_stage_pieces<1>(a, sh, b, r0, j0, kend, c0);
}

// Split `split` of the block's rows r0 .. r0 + kSplitRows - 1 (keys k0 .. kend - 1, kend past the
// block's last visible key): acc (rows 8 rg + i, latent columns dl + 64 b) and sh.ms, sh.ls.
// Scores: warp w takes rows 8 (w / 2) .. + 7 and keys 32 (w % 2) .. + 31, a lane two rows and four
// keys (sk + 8 i), four columns per 16-byte fragment load; the column chunks stream through two
// buffers. Each score is still one fmaf chain over the columns in order.
__device__ __forceinline__ void split_rows(const MlaArgs& a, SplitShared& sh, int64_t r0, int64_t k0, int64_t kend,
                                           float (&acc)[8][kLatentPerThread]) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int rows = int(a.T * a.H), K = int(a.C + a.R), C = int(a.C), ldc = int(a.ldc);
  const bool vec = split_vectors(a);
  const int sr = 8 * (warp >> 1) + 2 * (lane >> 3), sk = 32 * (warp & 1) + (lane & 7);
  // Sums: rows 8 rg + i, latent columns dl + 64 b.
  const int rg = tid >> 6, dl = tid & 63;
  int64_t slimit[2];
  for (int e = 0; e < 2; ++e) slimit[e] = r0 + sr + e < rows ? a.pos + (r0 + sr + e) / a.H : -1;
  const int nch = (K + kColChunk - 1) / kColChunk;
  __syncthreads();  // the previous split's readers of ms, ls and of both buffers are done
  if (tid < kSplitRows) sh.ms[tid] = -INFINITY, sh.ls[tid] = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int b = 0; b < kLatentPerThread; ++b) acc[i][b] = 0.0f;
  int g = 0;  // chunks staged so far: chunk g sits in buffer g & 1
  split_stage(a, sh, 0, r0, k0, kend, 0, vec);
  cp_async_commit();
  for (int64_t j0 = k0; j0 < kend; j0 += kTileKeys) {
    float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    for (int ch = 0; ch < nch; ++ch, ++g) {
      cp_async_wait<0>();
      __syncthreads();  // chunk g is in; every thread is done with buffer (g + 1) & 1
      if (ch + 1 < nch)
        split_stage(a, sh, (g + 1) & 1, r0, j0, kend, int64_t(ch + 1) * kColChunk, vec);
      else if (j0 + kTileKeys < kend)
        split_stage(a, sh, (g + 1) & 1, r0, j0 + kTileKeys, kend, 0, vec);
      cp_async_commit();
      const int b = g & 1;
      const int c0 = ch * kColChunk;
      const int kc = K - c0 < kColChunk ? K - c0 : kColChunk;
      const float* q0 = sh.qs[b][sr];
      const float* q1 = sh.qs[b][sr + 1];
      if (kc == kColChunk) {
#pragma unroll 2
        for (int c = 0; c < kColChunk; c += 4) {
          const float4 x0 = *reinterpret_cast<const float4*>(q0 + c), x1 = *reinterpret_cast<const float4*>(q1 + c);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float4 y = *reinterpret_cast<const float4*>(&sh.cs[b][sk + 8 * i][c]);
            sc[0][i] = fmaf(x0.x, y.x, sc[0][i]);
            sc[1][i] = fmaf(x1.x, y.x, sc[1][i]);
            sc[0][i] = fmaf(x0.y, y.y, sc[0][i]);
            sc[1][i] = fmaf(x1.y, y.y, sc[1][i]);
            sc[0][i] = fmaf(x0.z, y.z, sc[0][i]);
            sc[1][i] = fmaf(x1.z, y.z, sc[1][i]);
            sc[0][i] = fmaf(x0.w, y.w, sc[0][i]);
            sc[1][i] = fmaf(x1.w, y.w, sc[1][i]);
          }
        }
      } else {
        for (int c = 0; c < kc; ++c) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float cv = sh.cs[b][sk + 8 * i][c];
            sc[0][i] = fmaf(q0[c], cv, sc[0][i]);
            sc[1][i] = fmaf(q1[c], cv, sc[1][i]);
          }
        }
      }
    }
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t key = j0 + sk + 8 * i;
        sh.ps[sr + e][sk + 8 * i] = key <= slimit[e] ? sc[e][i] * a.scale : -INFINITY;
      }
    __syncthreads();
    // Online softmax, a warp per 4 rows: the tile's max, the factor for what came before, p, l.
    for (int rr = 0; rr < 4; ++rr) {
      const int r = warp * 4 + rr;
      const float v0 = sh.ps[r][lane], v1 = sh.ps[r][lane + 32];
      float tm = fmaxf(v0, v1);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, off));
      const float mo = sh.ms[r], mn = fmaxf(mo, tm);
      const float f = mn == mo ? 1.0f : expf(mo - mn);
      const float p0 = v0 == -INFINITY ? 0.0f : expf(v0 - mn), p1 = v1 == -INFINITY ? 0.0f : expf(v1 - mn);
      sh.ps[r][lane] = p0;
      sh.ps[r][lane + 32] = p1;
      float sum = p0 + p1;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      __syncwarp();
      if (lane == 0) {
        sh.ms[r] = mn;
        sh.ls[r] = fmaf(sh.ls[r], f, sum);
        sh.cr[r] = f;
      }
    }
    __syncthreads();
    // The weighted sum: rescaled, then the tile's keys in order (the probabilities of two keys
    // per 8-byte load).
    float f[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = sh.cr[rg * 8 + i];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int b = 0; b < kLatentPerThread; ++b) acc[i][b] *= f[i];
    const int jn = int(kend - j0 < kTileKeys ? kend - j0 : kTileKeys);
    int j = 0;
#pragma unroll 1
    for (; j + 2 <= jn; j += 2) {
      const float* c0 = a.cache + (j0 + j) * ldc + dl;
      const float* c1 = c0 + ldc;
      float v0[kLatentPerThread], v1[kLatentPerThread];
#pragma unroll
      for (int b = 0; b < kLatentPerThread; ++b) {
        const bool in = dl + 64 * b < C;
        v0[b] = in ? c0[64 * b] : 0.0f;
        v1[b] = in ? c1[64 * b] : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float2 p = *reinterpret_cast<const float2*>(&sh.ps[rg * 8 + i][j]);
#pragma unroll
        for (int b = 0; b < kLatentPerThread; ++b) acc[i][b] = fmaf(p.y, v1[b], fmaf(p.x, v0[b], acc[i][b]));
      }
    }
#pragma unroll 1
    for (; j < jn; ++j) {
      const float* cj = a.cache + (j0 + j) * ldc + dl;
      float v[kLatentPerThread];
#pragma unroll
      for (int b = 0; b < kLatentPerThread; ++b) v[b] = dl + 64 * b < C ? cj[64 * b] : 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float p = sh.ps[rg * 8 + i][j];
#pragma unroll
        for (int b = 0; b < kLatentPerThread; ++b) acc[i][b] = fmaf(p, v[b], acc[i][b]);
      }
    }
  }
  cp_async_wait<0>();  // nothing is left in flight (the last group is empty)
  __syncthreads();     // ms, ls final for every thread
}

// grid (ceil(T*H / kSplitRows), splits): one split each; the partial of (row r, split s) at
// part + (r * splits + s) * (C + 2): m, l, then the C weighted latent sums.
template <int MinBlocks>
__global__ void __launch_bounds__(kSplitThreads, MinBlocks) mla_split_kernel(MlaArgs a) {
  __shared__ SplitShared sh;
  const int64_t rows = a.T * a.H, r0 = int64_t(blockIdx.x) * kSplitRows, split = blockIdx.y, C = a.C;
  const int64_t last = (r0 + kSplitRows < rows ? r0 + kSplitRows : rows) - 1;
  const int64_t k0 = split * kSplitKeys, limit = a.pos + last / a.H;  // the block's last visible key
  if (k0 > limit) return;  // the whole block
  float acc[8][kLatentPerThread];
  split_rows(a, sh, r0, k0, k0 + kSplitKeys < limit + 1 ? k0 + kSplitKeys : limit + 1, acc);
  const int rg = threadIdx.x >> 6, dl = threadIdx.x & 63;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t r = r0 + rg * 8 + i;
    if (r >= rows) continue;
    float* out = a.part + (r * a.splits + split) * (C + 2);
    if (dl == 0) out[0] = sh.ms[rg * 8 + i], out[1] = sh.ls[rg * 8 + i];
#pragma unroll
    for (int b = 0; b < kLatentPerThread; ++b)
      if (dl + 64 * b < C) out[2 + dl + 64 * b] = acc[i][b];
  }
}

// ctx[r] = the row's partials folded in split order, over the folded sum. grid rows, 128 threads.
__global__ void mla_combine_kernel(MlaArgs a) {
  const int64_t r = blockIdx.x, C = a.C;
  const int64_t n = (a.pos + r / a.H) / kSplitKeys + 1;  // the splits holding the row's keys
  const float* p = a.part + r * a.splits * (C + 2);
  for (int64_t d = threadIdx.x; d < C; d += blockDim.x) {
    float M = -INFINITY, L = 0.0f, X = 0.0f;
    for (int64_t s = 0; s < n; ++s) {
      const float* q = p + s * (C + 2);
      const Fold k = fold_factors(M, q[0]);
      L = fold_value(L, q[1], k);
      X = fold_value(X, q[2 + d], k);
      M = k.M;
    }
    a.ctx[r * C + d] = __fdiv_rn(X, L);
  }
}

// grid ceil(T*H / kSplitRows): each block through its rows' splits in order, folding each row's
// split into its running max and sum (shared) and weighted sum (ctx, the thread's own columns)
// while the split is one of the row's, then ctx = the sum over the folded l.
template <int MinBlocks>
__global__ void __launch_bounds__(kSplitThreads, MinBlocks) mla_fold_kernel(MlaArgs a) {
  __shared__ SplitShared sh;
  const int64_t rows = a.T * a.H, r0 = int64_t(blockIdx.x) * kSplitRows, C = a.C;
  const int64_t last = (r0 + kSplitRows < rows ? r0 + kSplitRows : rows) - 1;
  const int64_t limit = a.pos + last / a.H;
  const int rg = threadIdx.x >> 6, dl = threadIdx.x & 63;
  if (threadIdx.x < kSplitRows) sh.run_m[threadIdx.x] = -INFINITY, sh.run_l[threadIdx.x] = 0.0f;
  float acc[8][kLatentPerThread];
  for (int64_t k0 = 0; k0 <= limit; k0 += kSplitKeys) {
    split_rows(a, sh, r0, k0, k0 + kSplitKeys < limit + 1 ? k0 + kSplitKeys : limit + 1, acc);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int rb = rg * 8 + i;
      const int64_t r = r0 + rb;
      if (r >= rows || k0 > a.pos + r / a.H) continue;  // not one of the row's splits
      const Fold k = fold_factors(sh.run_m[rb], sh.ms[rb]);
      float* x = a.ctx + r * C;
#pragma unroll
      for (int b = 0; b < kLatentPerThread; ++b) {
        const int64_t d = dl + 64 * b;
        if (d < C) x[d] = fold_value(k0 == 0 ? 0.0f : x[d], acc[i][b], k);
      }
    }
    __syncthreads();  // every thread read run_m before it moves
    if (threadIdx.x < kSplitRows) {
      const int rb = threadIdx.x;
      const int64_t r = r0 + rb;
      if (r < rows && k0 <= a.pos + r / a.H) {
        const Fold k = fold_factors(sh.run_m[rb], sh.ms[rb]);
        sh.run_l[rb] = fold_value(sh.run_l[rb], sh.ls[rb], k);
        sh.run_m[rb] = k.M;
      }
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t r = r0 + rg * 8 + i;
    if (r >= rows) continue;
    float* x = a.ctx + r * C;
#pragma unroll
    for (int b = 0; b < kLatentPerThread; ++b)
      if (dl + 64 * b < C) x[dl + 64 * b] = __fdiv_rn(x[dl + 64 * b], sh.run_l[rg * 8 + i]);
  }
}

// o[t, h*V + v] = W_UV[h][v] . ctx[t, h], one warp per output. grid (ceil(V/8), H, T); shared: ctx [C].
__global__ void mla_out_kernel(MlaArgs a, int64_t t0) {
  extern __shared__ float smem[];
  const int64_t h = blockIdx.y, t = t0 + blockIdx.z;
  const float* ctx = a.ctx + (t * a.H + h) * a.C;
  for (int64_t c = threadIdx.x; c < a.C; c += kThreads) smem[c] = ctx[c];
  __syncthreads();
  const int warp = threadIdx.x >> 5, warps = kThreads / 32;
  const int64_t v = int64_t(blockIdx.x) * warps + warp;
  if (v >= a.V) return;
  const int64_t w = h * (a.N + a.V) + a.N + v;
  float acc = 0.0f;
  for (int64_t c = threadIdx.x & 31; c < a.C; c += 32) acc = fmaf(decode_elem(a.kv_b, w, c), smem[c], acc);
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if ((threadIdx.x & 31) == 0) a.o[t * a.ldo + h * a.V + v] = acc;
}

__global__ void gqa_kernel(GqaArgs a) {
  __shared__ float shf[kThreads];
  __shared__ double shd[kThreads];
  const int64_t t = blockIdx.y, h = blockIdx.x;
  const int64_t hd = a.hd, kvh = h / (a.H / a.KV);
  const int64_t qpos = a.pos + t;
  const int64_t start = a.window > 0 ? (qpos - a.window + 1 > 0 ? qpos - a.window + 1 : 0) : 0;
  const int64_t n = qpos - start + 1;
  const float* q = a.q + t * a.ldq + h * hd;
  float* p = a.scratch + (t * a.H + h) * (a.pos + a.T + 1);
  const int warp = threadIdx.x >> 5, warps = kThreads / 32;
  for (int64_t j = warp; j < n; j += warps) {
    const float s = warp_dot(q, a.k + (start + j) * a.ldk + kvh * hd, hd) * a.scale;
    if ((threadIdx.x & 31) == 0) p[j] = s;
  }
  // A sink is one extra logit in the softmax whose probability is dropped.
  if (a.sinks && threadIdx.x == 0) p[n] = a.sinks[h];
  __syncthreads();
  block_softmax(p, a.sinks ? n + 1 : n, shf, shd);
  for (int64_t d = threadIdx.x; d < hd; d += kThreads) {
    float acc = 0.0f;
    for (int64_t j = 0; j < n; ++j) acc = fmaf(p[j], a.v[(start + j) * a.ldv + kvh * hd + d], acc);
    a.o[t * a.ldo + h * hd + d] = acc;
  }
}

constexpr int kMaxConv = 16;

// One thread per channel; the last K-1 raw inputs slide through registers.
__global__ void short_conv_kernel(const float* w, int64_t K, float* hist, int64_t ldh, float* x, int64_t ldx, int64_t T,
                                  int64_t C) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float win[kMaxConv];  // win[0..K-1): the K-1 raw values before the current row
  for (int64_t j = 0; j + 1 < K; ++j) win[j] = hist[j * ldh + c];
  for (int64_t t = 0; t < T; ++t) {
    const float raw = x[t * ldx + c];
    float acc = 0.0f;
    for (int64_t j = 0; j + 1 < K; ++j) acc += w[c * K + j] * win[j];
    acc += w[c * K + K - 1] * raw;
    x[t * ldx + c] = acc / (1.0f + expf(-acc));
    for (int64_t j = 0; j + 2 < K; ++j) win[j] = win[j + 1];
    if (K > 1) win[K - 2] = raw;
  }
  for (int64_t j = 0; j + 1 < K; ++j) hist[j * ldh + c] = win[j];
}

__global__ void kda_gate_kernel(bool softplus, float lower_bound, int64_t H, int64_t Dh, const float* a_log,
                                const float* dt_bias, float* z, int64_t ldz) {
  const int64_t t = blockIdx.y;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < H * Dh; k += int64_t(gridDim.x) * blockDim.x) {
    const float A = expf(a_log[k / Dh]);
    float& zz = z[t * ldz + k];
    const float zb = zz + dt_bias[k];
    if (softplus) {
      const float sp = zb > 20.0f ? zb : log1pf(expf(zb));
      zz = -A * sp;
    } else {
      zz = lower_bound * (1.0f / (1.0f + expf(-(A * zb))));
    }
  }
}

// One block per head, one thread per value channel j owning column j of the
// head's state (so no reductions across threads): token by token,
//   S <- diag(exp g) S;  u = v - S^T k;  S <- S + beta k u^T;  o = S^T q.
// Dynamic shared memory: k, exp(g), q for the current token [3 * Dh].
__global__ void delta_rule_kernel(const float* q, int64_t ldq, const float* k, int64_t ldk, const float* v, int64_t ldv,
                                  const float* g, int64_t ldg, const float* beta, int64_t ldb, float* S, int64_t ldS,
                                  int64_t T, int64_t Dh, float* o, int64_t ldo) {
  extern __shared__ float smem[];
  float *ks = smem, *eg = smem + Dh, *qs = smem + 2 * Dh;
  const int64_t h = blockIdx.x, j = threadIdx.x;
  float* Sh = S + h * Dh * ldS;
  for (int64_t t = 0; t < T; ++t) {
    __syncthreads();
    for (int64_t i = threadIdx.x; i < Dh; i += blockDim.x) {
      ks[i] = k[t * ldk + h * Dh + i];
      eg[i] = expf(g[t * ldg + h * Dh + i]);
      if (q) qs[i] = q[t * ldq + h * Dh + i];
    }
    __syncthreads();
    if (j >= Dh) continue;
    const float b = beta[t * ldb + h];
    float u = v[t * ldv + h * Dh + j];
    for (int64_t i = 0; i < Dh; ++i) {
      float& s = Sh[i * ldS + j];
      s *= eg[i];
      u += -ks[i] * s;
    }
    for (int64_t i = 0; i < Dh; ++i) Sh[i * ldS + j] += (b * ks[i]) * u;
    if (o) {
      float acc = 0.0f;
      for (int64_t i = 0; i < Dh; ++i) acc += qs[i] * Sh[i * ldS + j];
      o[t * ldo + h * Dh + j] = acc;
    }
  }
}

// One block per row: per source a double sum of squares and of proj*norm*v,
// a softmax over the sources, then their weighted sum.
__global__ void attn_res_kernel(AttnResArgs a) {
  __shared__ double shd[kThreads];
  __shared__ float w[kMaxAttnResSources];
  const int64_t t = blockIdx.x, D = a.D;
  for (int i = 0; i < a.n; ++i) {
    const float* v = a.src[i] + t * a.ld[i];
    double ss = 0.0, dot = 0.0;
    for (int64_t d = threadIdx.x; d < D; d += kThreads) {
      ss += double(v[d]) * v[d];
      dot += double(a.proj[d]) * a.norm[d] * v[d];
    }
    ss = block_sum(ss, shd);
    dot = block_sum(dot, shd);
    if (threadIdx.x == 0) w[i] = float(dot / sqrt(ss / double(D) + double(a.eps)));
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = w[0];
    for (int i = 1; i < a.n; ++i) m = fmaxf(m, w[i]);
    double sum = 0.0;
    for (int i = 0; i < a.n; ++i) {
      w[i] = expf(w[i] - m);
      sum += w[i];
    }
    const float inv = float(1.0 / sum);
    for (int i = 0; i < a.n; ++i) w[i] *= inv;
  }
  __syncthreads();
  for (int64_t d = threadIdx.x; d < D; d += kThreads) {
    float acc = 0.0f;
    for (int i = 0; i < a.n; ++i) acc = fmaf(w[i], a.src[i][t * a.ld[i] + d], acc);
    a.out[t * a.ldo + d] = acc;
  }
}

int done() { return int(cudaGetLastError()); }

}  // namespace

int64_t mla_splits(int64_t pos, int64_t T) { return (pos + T + kSplitKeys - 1) / kSplitKeys; }

// The MLA tile kernels at two blocks per SM (128 registers, some spilled; the default) or one
// (no register limit, ~200 each; SLUICE_CUDA_MLA_BLOCKS=1, for comparisons): the same operations
// either way, so the same bits. Measured on an H100 (K3 slice, 20,000-token prefill, MLA attention's
// GPU time): the previous kernel (one score column per shared-memory load, no staging overlap)
// 6.39 s, one block 4.36 s, two 4.02 s. scripts/test-gpu.sh passed with both (254/254 each).
bool mla_two_blocks() {
  static const bool two = [] {
    const char* e = std::getenv("SLUICE_CUDA_MLA_BLOCKS");
    return !(e && std::strcmp(e, "1") == 0);
  }();
  return two;
}

int mla_attend(const MlaArgs& a, Stream s) {
  if (a.T <= 0) return 0;
  const bool two_blocks = mla_two_blocks();
  if (a.C > 64 * kLatentPerThread) return int(cudaErrorInvalidValue);
  const cudaStream_t st = cudaStream_t(s);
  const unsigned H = unsigned(a.H), ctiles = unsigned((a.C + kColTile - 1) / kColTile);
  const unsigned vtiles = unsigned((a.V + kThreads / 32 - 1) / (kThreads / 32));
  for (int64_t t0 = 0; t0 < a.T; t0 += 65535) {  // grid z holds at most 65535 rows
    const unsigned T = unsigned(a.T - t0 < 65535 ? a.T - t0 : 65535);
    mla_qabs_kernel<<<dim3(ctiles, H, T), kColTile * kSlices, 0, st>>>(a, t0);
  }
  const int64_t rows = a.T * a.H, groups = (rows + kSplitRows - 1) / kSplitRows;
  if (rows > 0x7fffffff) return int(cudaErrorInvalidValue);
  if (a.part) {  // the splits in parallel, then folded (same operations per row as the folding kernel)
    if (a.splits != mla_splits(a.pos, a.T) || a.splits > 65535) return int(cudaErrorInvalidValue);
    if (two_blocks)
      mla_split_kernel<2><<<dim3(unsigned(groups), unsigned(a.splits)), kSplitThreads, 0, st>>>(a);
    else
      mla_split_kernel<1><<<dim3(unsigned(groups), unsigned(a.splits)), kSplitThreads, 0, st>>>(a);
    mla_combine_kernel<<<unsigned(rows), 128, 0, st>>>(a);
  } else {
    if (two_blocks)
      mla_fold_kernel<2><<<unsigned(groups), kSplitThreads, 0, st>>>(a);
    else
      mla_fold_kernel<1><<<unsigned(groups), kSplitThreads, 0, st>>>(a);
  }
  for (int64_t t0 = 0; t0 < a.T; t0 += 65535) {
    const unsigned T = unsigned(a.T - t0 < 65535 ? a.T - t0 : 65535);
    mla_out_kernel<<<dim3(vtiles, H, T), kThreads, size_t(a.C) * sizeof(float), st>>>(a, t0);
  }
  return done();
}

int gqa_attend(const GqaArgs& a, Stream s) {
  if (a.T <= 0) return 0;
  gqa_kernel<<<dim3(unsigned(a.H), unsigned(a.T)), kThreads, 0, cudaStream_t(s)>>>(a);
  return done();
}

int short_conv(const float* w, int64_t K, float* hist, int64_t ldh, float* x, int64_t ldx, int64_t T, int64_t C,
               Stream s) {
  if (K > kMaxConv || K < 1) return int(cudaErrorInvalidValue);
  if (C <= 0) return 0;
  short_conv_kernel<<<unsigned((C + kThreads - 1) / kThreads), kThreads, 0, cudaStream_t(s)>>>(w, K, hist, ldh, x, ldx,
                                                                                              T, C);
  return done();
}

int kda_gate(bool softplus, float lower_bound, int64_t H, int64_t Dh, const float* a_log, const float* dt_bias,
             float* z, int64_t ldz, int64_t T, Stream s) {
  if (T <= 0) return 0;
  const dim3 grid(unsigned((H * Dh + kThreads - 1) / kThreads), unsigned(T));
  kda_gate_kernel<<<grid, kThreads, 0, cudaStream_t(s)>>>(softplus, lower_bound, H, Dh, a_log, dt_bias, z, ldz);
  return done();
}

int delta_rule(const float* q, int64_t ldq, const float* k, int64_t ldk, const float* v, int64_t ldv, const float* g,
               int64_t ldg, const float* beta, int64_t ldb, float* S, int64_t ldS, int64_t T, int64_t H, int64_t Dh,
               float* o, int64_t ldo, Stream s) {
  if (T <= 0 || H <= 0) return 0;
  if (Dh > 1024) return int(cudaErrorInvalidValue);
  const unsigned threads = unsigned((Dh + 31) / 32 * 32);
  delta_rule_kernel<<<unsigned(H), threads, size_t(3 * Dh) * sizeof(float), cudaStream_t(s)>>>(
      q, ldq, k, ldk, v, ldv, g, ldg, beta, ldb, S, ldS, T, Dh, o, ldo);
  return done();
}

int attn_res_mix(const AttnResArgs& a, Stream s) {
  if (a.T <= 0) return 0;
  if (a.n < 1 || a.n > kMaxAttnResSources) return int(cudaErrorInvalidValue);
  attn_res_kernel<<<unsigned(a.T), kThreads, 0, cudaStream_t(s)>>>(a);
  return done();
}

}  // namespace sluice::cuda
