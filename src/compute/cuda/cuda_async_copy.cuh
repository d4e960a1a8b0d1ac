// cp.async (global -> shared without registers, sm_80+) for the CUDA kernels: a 16- or 4-byte
// copy whose source bytes past `bytes` are zero-filled (bytes 0: the destination gets zeros and
// the source is not read), committed in groups and waited for by group count.
#pragma once

#include <cuda_runtime.h>

namespace sluice::cuda {

__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) {
  const unsigned d = unsigned(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int bytes) {
  const unsigned d = unsigned(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

}  // namespace sluice::cuda
