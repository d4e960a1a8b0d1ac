// Matrix products over stored weight formats. Activations are f32 and every
// product accumulates in f32 from exactly decoded weights, so results differ
// from a float64 reference only by f32 rounding.
#pragma once
#include <cstdint>

#include "kernels/qmatrix.h"

namespace sluice {

// Y[i, r] = sum_c W[r, c] * X[i, c] for i < n (X row stride ldx, Y row stride ldy).
// Multithreaded over rows; uses AVX-512 when the CPU has it.
void matmul(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy);
inline void matvec(const QMatrix& W, const float* x, float* y) { matmul(W, x, 1, W.cols, y, W.rows); }

// y[c] += sum_r a[r] * W[r, c]  (the transposed product, single-threaded).
void matvec_transposed_acc(const QMatrix& W, const float* a, float* y);

// Scalar reference decode of one element / one row (the definition of each format).
float decode_elem_ref(const QMatrix& W, int64_t r, int64_t c);
void decode_row_ref(const QMatrix& W, int64_t r, float* out);

namespace kernels {
// Per-thread row range kernels: scalar reference and AVX-512 twin.
void matmul_rows_ref(const QMatrix& W, int64_t r0, int64_t r1, const float* X, int64_t n, int64_t ldx, float* Y,
                     int64_t ldy);
void matmul_rows_avx512(const QMatrix& W, int64_t r0, int64_t r1, const float* X, int64_t n, int64_t ldx, float* Y,
                        int64_t ldy);
bool cpu_has_avx512();
// Tests and benchmarks force the scalar path with this (default: SIMD where available).
void set_simd_enabled(bool on);
bool simd_enabled();
}  // namespace kernels

}  // namespace sluice
