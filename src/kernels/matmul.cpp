#include "kernels/matmul.h"

#include <algorithm>
#include <cstdint>
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
  // 64-byte aligned (rows are whole vectors): a full-width load that crosses
  // a cache line costs two loads, and the many-token tiles are load-bound.
  thread_local std::vector<float> xp;
  const int64_t ld = isa.padded_cols(W);
  if (xp.size() < size_t(n * ld + 16)) xp.resize(size_t(n * ld + 16));
  float* XP = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(xp.data()) + 63) & ~uintptr_t(63));
  // Split over tokens when large (a 64-token prompt chunk: 64 rows of
  // permuted copies that would otherwise keep the other threads waiting).
  if (n > 1 && n * W.cols >= (1 << 16))
    ThreadPool::global().parallel_for(n, 1, [&](int64_t b, int64_t e) {
      isa.prepare_x(W, X + b * ldx, e - b, ldx, XP + b * ld);
    });
  else
    isa.prepare_x(W, X, n, ldx, XP);
  run([&](int64_t b, int64_t e) { isa.rows(W, b, e, XP, n, Y, ldy); });
}

void matvec_transposed_acc(const QMatrix& W, const float* a, float* y) {
  const kernels::IsaKernels& isa = kernels::active_isa();
  if (isa.handles(W)) return isa.transposed_acc(W, a, y);
  kernels::matvec_transposed_acc_ref(W, a, y);
}

}  // namespace sluice
