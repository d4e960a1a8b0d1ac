// The CUDA backend's attention cores, following the CPU definitions in
// compute/cpu/cpu_attention.cpp: absorbed MLA over the latent cache, GQA with
// sinks and sliding windows, KDA's short convolution, decay gate and gated
// delta rule, and Block AttnRes mixing. GQA: one block per (query row, head):
// scores into scratch, a softmax with a double sum, then the weighted sum with
// one thread per output channel walking positions in order. MLA: the same
// steps, each its own launch spread over positions or column tiles.
#include <cuda_runtime.h>

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
constexpr int kPosPerBlock = 32;

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

// p[t, h, j] = (q_abs . latent_j + q_rope . k_rope_j) * scale, one warp per position.
// grid (ceil((pos+T)/32), H, T); dynamic shared memory: q_abs [C] then q_rope [R].
__global__ void mla_scores_kernel(MlaArgs a, int64_t t0) {
  extern __shared__ float smem[];
  const int64_t h = blockIdx.y, t = t0 + blockIdx.z, n = a.pos + t + 1;
  const int64_t j0 = int64_t(blockIdx.x) * kPosPerBlock;
  if (j0 >= n) return;  // the whole block: no barrier below is skipped by part of it
  float* qa = smem;
  float* qr = smem + a.C;
  const float* qabs = a.qabs + (t * a.H + h) * a.C;
  const float* qpe = a.q + t * a.ldq + h * (a.N + a.R) + a.N;
  for (int64_t c = threadIdx.x; c < a.C; c += kThreads) qa[c] = qabs[c];
  for (int64_t r = threadIdx.x; r < a.R; r += kThreads) qr[r] = qpe[r];
  __syncthreads();
  float* p = a.scores + (t * a.H + h) * (a.pos + a.T);
  const int warp = threadIdx.x >> 5, warps = kThreads / 32;
  for (int64_t j = j0 + warp; j < j0 + kPosPerBlock && j < n; j += warps) {
    const float* cj = a.cache + j * a.ldc;
    const float s = (warp_dot(qa, cj, a.C) + warp_dot(qr, cj + a.C, a.R)) * a.scale;
    if ((threadIdx.x & 31) == 0) p[j] = s;
  }
}

// p[t, h, :] <- softmax over the row's pos + t + 1 positions. grid (H, T)
__global__ void mla_softmax_kernel(MlaArgs a, int64_t t0) {
  __shared__ float shf[kThreads];
  __shared__ double shd[kThreads];
  const int64_t h = blockIdx.x, t = t0 + blockIdx.y;
  block_softmax(a.scores + (t * a.H + h) * (a.pos + a.T), a.pos + t + 1, shf, shd);
}

// ctx[t, h, c] = sum_j p[t, h, j] latent_j[c]. grid (ceil(C/32), H, T)
__global__ void mla_context_kernel(MlaArgs a, int64_t t0) {
  const int64_t h = blockIdx.y, t = t0 + blockIdx.z;
  const float* cache = a.cache;
  const int64_t ldc = a.ldc;
  weighted_row_sum(a.scores + (t * a.H + h) * (a.pos + a.T), a.pos + t + 1, a.C,
                   [&](int64_t j, int64_t c) { return cache[j * ldc + c]; }, a.ctx + (t * a.H + h) * a.C);
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

int mla_attend(const MlaArgs& a, Stream s) {
  if (a.T <= 0) return 0;
  const size_t shared = size_t(a.C + a.R) * sizeof(float);
  if (shared > 48 * 1024) return int(cudaErrorInvalidValue);
  const cudaStream_t st = cudaStream_t(s);
  const unsigned H = unsigned(a.H), ctiles = unsigned((a.C + kColTile - 1) / kColTile);
  const unsigned vtiles = unsigned((a.V + kThreads / 32 - 1) / (kThreads / 32));
  for (int64_t t0 = 0; t0 < a.T; t0 += 65535) {  // grid z holds at most 65535 rows
    const unsigned T = unsigned(a.T - t0 < 65535 ? a.T - t0 : 65535);
    const unsigned ptiles = unsigned((a.pos + t0 + T + kPosPerBlock - 1) / kPosPerBlock);
    mla_qabs_kernel<<<dim3(ctiles, H, T), kColTile * kSlices, 0, st>>>(a, t0);
    mla_scores_kernel<<<dim3(ptiles, H, T), kThreads, shared, st>>>(a, t0);
    mla_softmax_kernel<<<dim3(H, T), kThreads, 0, st>>>(a, t0);
    mla_context_kernel<<<dim3(ctiles, H, T), kColTile * kSlices, 0, st>>>(a, t0);
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
