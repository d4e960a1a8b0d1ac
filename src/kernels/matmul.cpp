#include "kernels/matmul.h"

#include <algorithm>
#include <atomic>

#include "util/thread_pool.h"

namespace sluice {
namespace kernels {

namespace {
std::atomic<bool> g_simd{true};
}

bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has;
}
void set_simd_enabled(bool on) { g_simd = on; }
bool simd_enabled() { return g_simd && cpu_has_avx512(); }

}  // namespace kernels

void matmul(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy) {
  auto rows_fn = kernels::simd_enabled() ? kernels::matmul_rows_avx512 : kernels::matmul_rows_ref;
  // Split over rows so each thread streams its own part of the weights; tiny
  // products stay on the calling thread.
  const int64_t work = W.rows * W.cols * std::max<int64_t>(n, 1);
  if (work < (1 << 18)) {
    rows_fn(W, 0, W.rows, X, n, ldx, Y, ldy);
    return;
  }
  ThreadPool::global().parallel_for(W.rows, 16, [&](int64_t b, int64_t e) { rows_fn(W, b, e, X, n, ldx, Y, ldy); });
}

}  // namespace sluice
