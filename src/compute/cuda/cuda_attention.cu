// The CUDA backend's attention cores, following the CPU definitions in
// compute/cpu/cpu_attention.cpp: absorbed MLA over the latent cache, GQA with
// sinks and sliding windows, KDA's short convolution, decay gate and gated
// delta rule, and Block AttnRes mixing. One block per (query row, head) for
// attention: scores into scratch, a softmax with a double sum, then the
// weighted sum with one thread per output channel walking positions in order.
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

// Dynamic shared memory: qabs [C], ctx [C], then the rope query [R].
__global__ void mla_kernel(MlaArgs a) {
  extern __shared__ float smem[];
  __shared__ float shf[kThreads];
  __shared__ double shd[kThreads];
  const int64_t t = blockIdx.y, h = blockIdx.x;
  const int64_t C = a.C, R = a.R, N = a.N, V = a.V, qh = N + R;
  const int64_t n = a.pos + t + 1;
  float* qabs = smem;
  float* ctx = smem + C;
  const float* qn = a.q + t * a.ldq + h * qh;
  const float* qpe = qn + N;
  const int64_t w0 = h * (N + V);
  // q_abs[c] = sum_i q_nope[i] W_UK[h][i][c]
  for (int64_t c = threadIdx.x; c < C; c += kThreads) {
    float acc = 0.0f;
    for (int64_t i = 0; i < N; ++i) acc = fmaf(qn[i], decode_elem(a.kv_b, w0 + i, c), acc);
    qabs[c] = acc;
  }
  __syncthreads();
  float* p = a.scratch + (t * a.H + h) * (a.pos + a.T);
  const int warp = threadIdx.x >> 5, warps = kThreads / 32;
  for (int64_t j = warp; j < n; j += warps) {
    const float* cj = a.cache + j * a.ldc;
    const float s = (warp_dot(qabs, cj, C) + warp_dot(qpe, cj + C, R)) * a.scale;
    if ((threadIdx.x & 31) == 0) p[j] = s;
  }
  __syncthreads();
  block_softmax(p, n, shf, shd);
  for (int64_t c = threadIdx.x; c < C; c += kThreads) {
    float acc = 0.0f;
    for (int64_t j = 0; j < n; ++j) acc = fmaf(p[j], a.cache[j * a.ldc + c], acc);
    ctx[c] = acc;
  }
  __syncthreads();
  // o[v] = W_UV[h][v] . ctx
  for (int64_t v = warp; v < V; v += warps) {
    float acc = 0.0f;
    for (int64_t c = threadIdx.x & 31; c < C; c += 32) acc = fmaf(decode_elem(a.kv_b, w0 + N + v, c), ctx[c], acc);
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if ((threadIdx.x & 31) == 0) a.o[t * a.ldo + h * V + v] = acc;
  }
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
  const size_t shared = size_t(2 * a.C) * sizeof(float);
  if (shared > 48 * 1024) return int(cudaErrorInvalidValue);
  mla_kernel<<<dim3(unsigned(a.H), unsigned(a.T)), kThreads, shared, cudaStream_t(s)>>>(a);
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
