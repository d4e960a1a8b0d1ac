// Element-wise and per-row kernels of the CUDA backend: norms, residual adds,
// activations, RoPE, and the MoE gather / weighted scatter-add. Per-row sums
// (norms) use a fixed block-wide tree over the row's values, in double like
// the CPU's (kernels/ops.cpp).
#include <cuda_runtime.h>

#include "compute/cuda/cuda_device_decode.cuh"
#include "compute/cuda/cuda_kernels.h"

namespace sluice::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }

__device__ __forceinline__ float gated_value(const GatedActivation& a, float g, float u) {
  switch (a.kind) {
    case GatedActivation::SwiGLU: return silu_f(g) * u;
    case GatedActivation::SiTU:
      return a.beta * tanhf(g / a.beta) * sigmoid_f(g) * (a.linear_beta * tanhf(u / a.linear_beta));
    case GatedActivation::ClampedSwiGLU: {
      g = fminf(g, a.limit);
      u = fmaxf(-a.limit, fminf(u, a.limit));
      return (u + 1.0f) * g * sigmoid_f(a.alpha * g);
    }
  }
  return 0.0f;
}

// Sum over the block (blockDim.x == kThreads) in a fixed tree; every thread gets it.
__device__ double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  const double r = shared[0];
  __syncthreads();
  return r;
}

// One block per (row, group).
__global__ void rmsnorm_kernel(const float* x, int64_t ldx, const float* w, float eps, float* out, int64_t ldo,
                               int64_t group) {
  __shared__ double sh[kThreads];
  const int64_t t = blockIdx.y, c0 = int64_t(blockIdx.x) * group;
  const float* xr = x + t * ldx + c0;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < group; i += kThreads) ss += double(xr[i]) * double(xr[i]);
  ss = block_sum(ss, sh);
  const float inv = float(1.0 / sqrt(ss / double(group) + double(eps)));
  float* o = out + t * ldo + c0;
    // w has `group` values, the same for every group (as the CPU's ops::rmsnorm per group)
  for (int64_t i = threadIdx.x; i < group; i += kThreads) o[i] = w ? xr[i] * inv * w[i] : xr[i] * inv;
}

__global__ void l2norm_kernel(float* x, int64_t ldx, int64_t group, float eps, float mul) {
  __shared__ double sh[kThreads];
  float* v = x + int64_t(blockIdx.y) * ldx + int64_t(blockIdx.x) * group;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < group; i += kThreads) ss += double(v[i]) * v[i];
  ss = block_sum(ss, sh);
  const float inv = float(1.0 / sqrt(ss + eps)) * mul;
  for (int64_t i = threadIdx.x; i < group; i += kThreads) v[i] *= inv;
}

// A 2-D launch over [rows, cols]: blockIdx.y is the row, x strides the columns.
dim3 grid2(int64_t rows, int64_t cols) {
  return dim3(unsigned(cols < 65536 * kThreads ? (cols + kThreads - 1) / kThreads : 65535), unsigned(rows));
}
#define SLUICE_FOR_COLS(c, cols) \
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < (cols); c += int64_t(gridDim.x) * blockDim.x)

__global__ void add_kernel(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t cols) {
  const int64_t t = blockIdx.y;
  SLUICE_FOR_COLS(c, cols) y[t * ldy + c] += x[t * ldx + c];
}
__global__ void add_row_kernel(const float* b, float* y, int64_t ldy, int64_t cols) {
  const int64_t t = blockIdx.y;
  SLUICE_FOR_COLS(c, cols) y[t * ldy + c] += b[c];
}
__global__ void mul_sigmoid_kernel(const float* g, int64_t ldg, float* y, int64_t ldy, int64_t cols) {
  const int64_t t = blockIdx.y;
  SLUICE_FOR_COLS(c, cols) y[t * ldy + c] *= sigmoid_f(g[t * ldg + c]);
}
__global__ void sigmoid_kernel(float* x, int64_t ldx, int64_t cols) {
  const int64_t t = blockIdx.y;
  SLUICE_FOR_COLS(c, cols) x[t * ldx + c] = sigmoid_f(x[t * ldx + c]);
}
__global__ void gated_kernel(GatedActivation act, const float* g, int64_t ldg, const float* u, int64_t ldu, float* o,
                             int64_t ldo, int64_t cols) {
  const int64_t t = blockIdx.y;
  SLUICE_FOR_COLS(c, cols) o[t * ldo + c] = gated_value(act, g[t * ldg + c], u[t * ldu + c]);
}
__global__ void gated_interleaved_kernel(GatedActivation act, const float* gu, int64_t ldgu, float* o, int64_t ldo,
                                         int64_t cols) {
  const int64_t t = blockIdx.y;
  SLUICE_FOR_COLS(j, cols) o[t * ldo + j] = gated_value(act, gu[t * ldgu + 2 * j], gu[t * ldgu + 2 * j + 1]);
}

// One thread per (row, head, pair), the definition in compute/rope.cpp.
__global__ void rope_kernel(const double* inv_freq, int64_t dim, bool interleaved, double af, float* x, int64_t ldx,
                            int64_t heads, int64_t stride, int64_t offset, int64_t pos0) {
  const int64_t t = blockIdx.y, half = dim / 2;
  SLUICE_FOR_COLS(k, heads * half) {
    const int64_t h = k / half, i = k % half;
    const double a = double(pos0 + t) * inv_freq[i];
    const float c = float(cos(a) * af), s = float(sin(a) * af);
    float* v = x + t * ldx + h * stride + offset;
    const int64_t i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
    const float x0 = v[i0], x1 = v[i1];
    v[i0] = x0 * c - x1 * s;
    v[i1] = x1 * c + x0 * s;
  }
}

__global__ void gather_kernel(const float* src, int64_t lds, RowList rows, float* dst, int64_t ldd, int64_t cols) {
  const int64_t i = blockIdx.y;
  const float* s = src + row_at(rows, i) * lds;
  SLUICE_FOR_COLS(c, cols) dst[i * ldd + c] = s[c];
}

// One thread per column walks the rows in order (rows may repeat).
__global__ void scatter_add_kernel(const float* src, int64_t lds, RowList rows, float* acc, int64_t lda,
                                   int64_t cols) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int64_t i = 0; i < rows.n; ++i) {
    float* a = acc + row_at(rows, i) * lda + c;
    *a = fmaf(weight_at(rows, i), src[i * lds + c], *a);
  }
}

__global__ void scatter_by_target_kernel(const float* src, int64_t lds, ScatterPlan p, float* acc, int64_t lda,
                                         int64_t cols) {
  const int64_t j = blockIdx.y;
  float* a = acc + p.targets[j] * lda;
  const int64_t k0 = p.starts[j], k1 = p.starts[j + 1];
  SLUICE_FOR_COLS(c, cols) {
    float v = a[c];
    for (int64_t k = k0; k < k1; ++k) v = fmaf(p.weights[k], src[p.src_rows[k] * lds + c], v);
    a[c] = v;
  }
}

// A grid-stride walk over the packed indices; the lowest non-finite one wins.
// `base` is added to every index (the deferred check's tag in the high bits).
__global__ void first_nonfinite_kernel(const float* x, int64_t ldx, int64_t rows, int64_t cols,
                                       unsigned long long* first, unsigned long long base) {
  const int64_t n = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    if (!isfinite(x[r * ldx + c])) atomicMin(first, base + static_cast<unsigned long long>(i));
  }
}

// After first_nonfinite_kernel over x (tag in the key's high bits): the value at the recorded index when it is x's.
__global__ void nonfinite_value_kernel(const float* x, int64_t ldx, int64_t cols, unsigned long long tag,
                                       NonFiniteRecord* rec) {
  const unsigned long long key = rec->key;
  if (key == ~0ull || key >> 40 != tag) return;
  const int64_t i = int64_t(key & ((1ull << 40) - 1)), r = i / cols;
  rec->value = x[r * ldx + (i - r * cols)];
}

int done() { return int(cudaGetLastError()); }

}  // namespace

int rmsnorm(const float* x, int64_t ldx, int64_t rows, int64_t cols, const float* w, float eps, float* out,
            int64_t ldo, int64_t group, Stream s) {
  if (rows <= 0 || cols <= 0) return 0;
  const int64_t g = group > 0 ? group : cols;
  rmsnorm_kernel<<<dim3(unsigned(cols / g), unsigned(rows)), kThreads, 0, cudaStream_t(s)>>>(x, ldx, w, eps, out, ldo, g);
  return done();
}

int l2norm(float* x, int64_t ldx, int64_t rows, int64_t cols, int64_t group, float eps, float mul, Stream s) {
  if (rows <= 0 || cols <= 0) return 0;
  l2norm_kernel<<<dim3(unsigned(cols / group), unsigned(rows)), kThreads, 0, cudaStream_t(s)>>>(x, ldx, group, eps, mul);
  return done();
}

int add(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t cols, Stream s) {
  if (rows <= 0 || cols <= 0) return 0;
  add_kernel<<<grid2(rows, cols), kThreads, 0, cudaStream_t(s)>>>(x, ldx, y, ldy, cols);
  return done();
}

int add_row(const float* b, float* y, int64_t ldy, int64_t rows, int64_t cols, Stream s) {
  if (rows <= 0 || cols <= 0) return 0;
  add_row_kernel<<<grid2(rows, cols), kThreads, 0, cudaStream_t(s)>>>(b, y, ldy, cols);
  return done();
}

int mul_sigmoid(const float* g, int64_t ldg, float* y, int64_t ldy, int64_t rows, int64_t cols, Stream s) {
  if (rows <= 0 || cols <= 0) return 0;
  mul_sigmoid_kernel<<<grid2(rows, cols), kThreads, 0, cudaStream_t(s)>>>(g, ldg, y, ldy, cols);
  return done();
}

int sigmoid(float* x, int64_t ldx, int64_t rows, int64_t cols, Stream s) {
  if (rows <= 0 || cols <= 0) return 0;
  sigmoid_kernel<<<grid2(rows, cols), kThreads, 0, cudaStream_t(s)>>>(x, ldx, cols);
  return done();
}

int gated(const GatedActivation& act, const float* g, int64_t ldg, const float* u, int64_t ldu, float* out,
          int64_t ldo, int64_t rows, int64_t cols, Stream s) {
  if (rows <= 0 || cols <= 0) return 0;
  gated_kernel<<<grid2(rows, cols), kThreads, 0, cudaStream_t(s)>>>(act, g, ldg, u, ldu, out, ldo, cols);
  return done();
}

int gated_interleaved(const GatedActivation& act, const float* gu, int64_t ldgu, float* out, int64_t ldo,
                      int64_t rows, int64_t cols, Stream s) {
  if (rows <= 0 || cols <= 0) return 0;
  gated_interleaved_kernel<<<grid2(rows, cols), kThreads, 0, cudaStream_t(s)>>>(act, gu, ldgu, out, ldo, cols);
  return done();
}

int rope(const double* inv_freq, int64_t dim, bool interleaved, double attention_factor, float* x, int64_t ldx,
         int64_t rows, int64_t heads, int64_t stride, int64_t offset, int64_t pos0, Stream s) {
  if (rows <= 0 || heads <= 0 || dim < 2) return 0;
  rope_kernel<<<grid2(rows, heads * (dim / 2)), kThreads, 0, cudaStream_t(s)>>>(inv_freq, dim, interleaved,
                                                                                attention_factor, x, ldx, heads,
                                                                                stride, offset, pos0);
  return done();
}

int first_nonfinite(const float* x, int64_t ldx, int64_t rows, int64_t cols, unsigned long long* first, Stream s) {
  if (rows <= 0 || cols <= 0) return 0;
  const int64_t blocks = (rows * cols + kThreads - 1) / kThreads;
  first_nonfinite_kernel<<<unsigned(blocks < 4096 ? blocks : 4096), kThreads, 0, cudaStream_t(s)>>>(x, ldx, rows, cols,
                                                                                                   first, 0);
  return done();
}

int watch_nonfinite(const float* x, int64_t ldx, int64_t rows, int64_t cols, int64_t tag, NonFiniteRecord* rec,
                    Stream s) {
  if (rows <= 0 || cols <= 0) return 0;
  if (tag < 0 || tag >= (1 << 23) || rows * cols >= (int64_t(1) << 40)) return int(cudaErrorInvalidValue);
  const int64_t blocks = (rows * cols + kThreads - 1) / kThreads;
  const unsigned long long base = static_cast<unsigned long long>(tag) << 40;
  first_nonfinite_kernel<<<unsigned(blocks < 4096 ? blocks : 4096), kThreads, 0, cudaStream_t(s)>>>(
      x, ldx, rows, cols, &rec->key, base);
  nonfinite_value_kernel<<<1, 1, 0, cudaStream_t(s)>>>(x, ldx, cols, static_cast<unsigned long long>(tag), rec);
  return done();
}

int gather_rows(const float* src, int64_t lds, const RowList& rows, int64_t cols, float* dst, int64_t ldd, Stream s) {
  if (rows.n <= 0 || cols <= 0) return 0;
  gather_kernel<<<grid2(rows.n, cols), kThreads, 0, cudaStream_t(s)>>>(src, lds, rows, dst, ldd, cols);
  return done();
}

int scatter_add(const float* src, int64_t lds, const RowList& rows, int64_t cols, float* acc, int64_t lda, Stream s) {
  if (rows.n <= 0 || cols <= 0) return 0;
  scatter_add_kernel<<<unsigned((cols + kThreads - 1) / kThreads), kThreads, 0, cudaStream_t(s)>>>(src, lds, rows, acc,
                                                                                                 lda, cols);
  return done();
}

int scatter_add_by_target(const float* src, int64_t lds, const ScatterPlan& plan, int64_t cols, float* acc,
                          int64_t lda, Stream s) {
  if (plan.n_targets <= 0 || cols <= 0) return 0;
  if (plan.n_targets > 65535) return int(cudaErrorInvalidValue);
  scatter_by_target_kernel<<<grid2(plan.n_targets, cols), kThreads, 0, cudaStream_t(s)>>>(src, lds, plan, acc, lda,
                                                                                          cols);
  return done();
}

}  // namespace sluice::cuda
