// One ISA's implementation of the vector operations in kernels/ops.h.
#pragma once
#include <cstdint>
#include <span>

namespace sluice::kernels {

struct VectorOps {
  int64_t hwy_target;  // 0: the scalar reference
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float a, const float* x, float* y, int64_t n);
  void (*scale)(float* x, float a, int64_t n);
  void (*add)(const float* x, float* y, int64_t n);
};

// The SIMD ISAs' entries (kernels/vector_ops_simd.cpp).
std::span<const VectorOps> simd_vector_ops();

}  // namespace sluice::kernels
