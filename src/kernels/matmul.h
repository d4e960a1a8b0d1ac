// Matrix products over stored weight formats. Activations are f32 and every
// product accumulates in f32 from exactly decoded weights, so results differ
// from a float64 reference only by f32 rounding.
#pragma once
#include <cstdint>

#include "kernels/qmatrix.h"

namespace sluice {

// Y[i, r] = sum_c W[r, c] * X[i, c] for i < n (X row stride ldx, Y row stride ldy).
// Multithreaded over rows, with the SIMD kernels of the ISA chosen at run time
// (kernels/isa.h). Each output's summation order depends only on the ISA, never
// on n or the thread split, so a batch gives the same bits as one token at a time.
void matmul(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy);
inline void matvec(const QMatrix& W, const float* x, float* y) { matmul(W, x, 1, W.cols, y, W.rows); }

// y[c] += sum_r a[r] * W[r, c]  (the transposed product, single-threaded; the
// same bits as the scalar reference on every ISA).
void matvec_transposed_acc(const QMatrix& W, const float* a, float* y);

// Scalar reference decode of one element / one row (the definition of each format).
float decode_elem_ref(const QMatrix& W, int64_t r, int64_t c);
void decode_row_ref(const QMatrix& W, int64_t r, float* out);

namespace kernels {
// The scalar reference kernels (the definition the SIMD kernels are tested against).
void matmul_rows_ref(const QMatrix& W, int64_t r0, int64_t r1, const float* X, int64_t n, int64_t ldx, float* Y,
                     int64_t ldy);
void matvec_transposed_acc_ref(const QMatrix& W, const float* a, float* y);
}  // namespace kernels

}  // namespace sluice
