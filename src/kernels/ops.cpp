#include "kernels/ops.h"

#include <algorithm>

#include "kernels/isa.h"

namespace sluice::ops {

void rmsnorm(const float* x, const float* w, float eps, int64_t n, float* out) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
  const float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
  if (w) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv;
  }
}

float dot_ref(const float* a, const float* b, int64_t n) {
  // Eight partial sums keep the loop vectorisable and the rounding small.
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float s = 0.0f;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int k = 0; k < 8; ++k) s += acc[k];
  return s;
}

void axpy_ref(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void scale_ref(float* x, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

void add_ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

float dot(const float* a, const float* b, int64_t n) { return kernels::active_isa().vec.dot(a, b, n); }
void axpy(float a, const float* x, float* y, int64_t n) { kernels::active_isa().vec.axpy(a, x, y, n); }
void scale(float* x, float a, int64_t n) { kernels::active_isa().vec.scale(x, a, n); }
void add(const float* x, float* y, int64_t n) { kernels::active_isa().vec.add(x, y, n); }

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float m = *std::max_element(x, x + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  const float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace sluice::ops
