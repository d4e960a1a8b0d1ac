// Small f32 vector operations used by the forward passes.
#pragma once
#include <cmath>
#include <cstdint>

namespace sluice::ops {

// out = x / sqrt(mean(x^2) + eps) * w   (w may be null: no weight). out may alias x.
void rmsnorm(const float* x, const float* w, float eps, int64_t n, float* out);

// These run with the ISA of kernels/isa.h. axpy, scale and add round exactly
// like the scalar code on every ISA; dot's summation order is fixed per ISA.
float dot(const float* a, const float* b, int64_t n);
void axpy(float a, const float* x, float* y, int64_t n);  // y += a x
void scale(float* x, float a, int64_t n);
void add(const float* x, float* y, int64_t n);  // y += x

// The scalar reference versions.
float dot_ref(const float* a, const float* b, int64_t n);
void axpy_ref(float a, const float* x, float* y, int64_t n);
void scale_ref(float* x, float a, int64_t n);
void add_ref(const float* x, float* y, int64_t n);

// In-place softmax over n values (computed with the max subtracted).
void softmax(float* x, int64_t n);

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace sluice::ops
