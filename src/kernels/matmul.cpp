#include "kernels/matmul.h"

#include <algorithm>
#include <vector>

#include "kernels/isa.h"
#include "util/thread_pool.h"

namespace sluice {

void matmul(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy) {
  if (n <= 0 || W.rows <= 0) return;
  const kernels::IsaKernels& isa = kernels::active_isa();
  // Split over rows so each thread streams its own part of the weights; tiny
  // products stay on the calling thread.
  const int64_t work = W.rows * W.cols * n;
  auto run = [&](auto&& rows_fn) {
    if (work < (1 << 18)) return rows_fn(int64_t(0), W.rows);
    ThreadPool::global().parallel_for(W.rows, 16, [&](int64_t b, int64_t e) { rows_fn(b, e); });
  };
  if (isa.hwy_target == 0 || !isa.handles(W)) {
    run([&](int64_t b, int64_t e) { kernels::matmul_rows_ref(W, b, e, X, n, ldx, Y, ldy); });
    return;
  }
  // Activations in the kernel's column order, once for all rows and threads.
  thread_local std::vector<float> xp;
  const int64_t ld = isa.padded_cols(W);
  if (xp.size() < size_t(n * ld)) xp.resize(size_t(n * ld));
  isa.prepare_x(W, X, n, ldx, xp.data());
  const float* XP = xp.data();
  run([&](int64_t b, int64_t e) { isa.rows(W, b, e, XP, n, Y, ldy); });
}

void matvec_transposed_acc(const QMatrix& W, const float* a, float* y) {
  const kernels::IsaKernels& isa = kernels::active_isa();
  if (isa.handles(W)) return isa.transposed_acc(W, a, y);
  kernels::matvec_transposed_acc_ref(W, a, y);
}

}  // namespace sluice
