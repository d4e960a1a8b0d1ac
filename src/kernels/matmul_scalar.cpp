// Scalar reference kernels: the products as the definition of each weight
// format (its codec's decode, kernels/weight_formats.cpp) says, in column order.
#include <vector>

#include "kernels/matmul.h"

namespace sluice {

namespace kernels {

void matmul_rows_ref(const QMatrix& W, int64_t r0, int64_t r1, const float* X, int64_t n, int64_t ldx, float* Y,
                     int64_t ldy) {
  std::vector<float> row(size_t(W.cols));
  for (int64_t r = r0; r < r1; ++r) {
    decode_row_ref(W, r, row.data());
    for (int64_t i = 0; i < n; ++i) {
      const float* x = X + i * ldx;
      float acc = 0.0f;
      for (int64_t c = 0; c < W.cols; ++c) acc += row[size_t(c)] * x[c];
      Y[i * ldy + r] = acc;
    }
  }
}

void matvec_transposed_acc_ref(const QMatrix& W, const float* a, float* y) {
  std::vector<float> row(size_t(W.cols));
  for (int64_t r = 0; r < W.rows; ++r) {
    if (a[r] == 0.0f) continue;
    decode_row_ref(W, r, row.data());
    const float ar = a[r];
    for (int64_t c = 0; c < W.cols; ++c) y[c] += ar * row[size_t(c)];
  }
}

}  // namespace kernels

}  // namespace sluice
