#include "compute/devices.h"

#ifdef SLUICE_HAVE_CUDA
#include <cuda_runtime.h>

#include "compute/cuda/cuda_backend.h"
#include "compute/cuda/cuda_kernels.h"
#include "compute/cuda/vram_experts.h"
#endif
#include <algorithm>

#include "util/error.h"

namespace sluice {

CudaReport cuda_report() {
  CudaReport r;
#ifdef SLUICE_HAVE_CUDA
  r.compiled = true;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    r.error = cudaGetErrorString(e);
    return r;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    GpuInfo g;
    g.index = i;
    if (cudaGetDeviceProperties(&p, i) == cudaSuccess) {
      g.name = p.name;
      g.cc_major = p.major;
      g.cc_minor = p.minor;
      g.multiprocessors = p.multiProcessorCount;
    }
    cudaDeviceGetAttribute(&g.clock_khz, cudaDevAttrClockRate, i);
    size_t free = 0, total = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free, &total) == cudaSuccess) {
      g.free_bytes = free;
      g.total_bytes = total;
    }
    r.devices.push_back(g);
  }
#endif
  return r;
}

Backend& backend_for_device(bool cuda, int index) {
  if (!cuda) return cpu_backend();
#ifdef SLUICE_HAVE_CUDA
  return cuda_backend(index);
#else
  fail("--device cuda:{}: this build has no CUDA backend (configure with nvcc installed, -DSLUICE_CUDA=ON)", index);
#endif
}

void cuda_tensor_core_products(bool on) {
#ifdef SLUICE_HAVE_CUDA
  cuda::set_tensor_core_products(on);
#else
  (void)on;
#endif
}

double cuda_mma_rate_tflops(int device) {
#ifdef SLUICE_HAVE_CUDA
  if (cudaSetDevice(device) != cudaSuccess) return 0;
  return cuda::mma_rate_tflops();
#else
  (void)device;
  return 0;
#endif
}

DeviceMemory device_memory(Backend& be) {
#ifdef SLUICE_HAVE_CUDA
  if (auto* c = dynamic_cast<CudaBackend*>(&be)) return {c->free_device_bytes(), c->weight_bytes()};
#endif
  (void)be;
  return {};
}

uint64_t device_expert_bytes(Backend& be, const ExpertTable& shapes) {
  uint64_t largest = 0;
#ifdef SLUICE_HAVE_CUDA
  if (dynamic_cast<CudaBackend*>(&be))
    for (int32_t l = 0; l < shapes.layers(); ++l)
      for (int32_t e = 0; e < shapes.experts(l); ++e)
        largest = std::max(largest, VramExperts::placed_bytes(shapes.at(l, e)));
#endif
  (void)be;
  (void)shapes;
  return largest;
}

std::unique_ptr<ExpertSource> make_vram_experts(Backend& be, ExpertSource& host, std::unique_ptr<ExpertSource> owned,
                                                const ExpertTable& shapes, uint64_t bytes, uint64_t* slot_bytes) {
#ifdef SLUICE_HAVE_CUDA
  if (auto* c = dynamic_cast<CudaBackend*>(&be)) {
    auto v = std::make_unique<VramExperts>(*c, host, std::move(owned), shapes, bytes);
    if (slot_bytes) *slot_bytes = v->slot_bytes();
    v->preload(shapes);
    return v;
  }
#endif
  (void)be, (void)host, (void)owned, (void)shapes, (void)bytes, (void)slot_bytes;
  return nullptr;
}

}  // namespace sluice
