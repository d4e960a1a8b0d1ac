#include "compute/devices.h"

#ifdef SLUICE_HAVE_CUDA
#include <cuda_runtime.h>

#include "compute/cuda/cuda_backend.h"
#include "compute/cuda/cuda_kernels.h"
#endif
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "compute/tensor.h"
#include "util/error.h"

namespace sluice {

namespace {
std::string cuda_version_text(int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); }

#ifdef SLUICE_HAVE_CUDA
// What is there of the driver: its library, the CUDA version it supports, its device nodes.
CudaProbe probe_cuda_driver(cudaError_t e) {
  CudaProbe p;
  p.error = int(e);
  p.error_text = cudaGetErrorString(e);
  cudaRuntimeGetVersion(&p.runtime_version);
  std::error_code ec;
  p.device_nodes = std::filesystem::exists("/dev/nvidiactl", ec);
  if (void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    p.driver_library = true;
    using GetVersion = int (*)(int*);
    if (auto get = reinterpret_cast<GetVersion>(dlsym(lib, "cuDriverGetVersion"))) {
      int v = 0;
      if (get(&v) == 0) p.driver_version = v;
    }
    dlclose(lib);
  }
  return p;
}
#endif
}  // namespace

std::string explain_cuda_failure(const CudaProbe& p) {
  const std::string runtime = p.runtime_version > 0 ? "CUDA " + cuda_version_text(p.runtime_version) : "its CUDA";
  const std::string raw = p.error_text.empty() ? "" : " [CUDA: " + p.error_text + "]";
  if (!p.driver_library)
    return fmt::format("no NVIDIA driver is installed (libcuda.so.1 not found{}): install the NVIDIA driver for "
                       "the GPU (one that supports {}) to compute on it; sluice computes on the CPU{}",
                       p.device_nodes ? "" : ", no /dev/nvidiactl", runtime, raw);
  if (p.driver_version > 0 && p.runtime_version > 0 && p.driver_version < p.runtime_version)
    return fmt::format("the NVIDIA driver is too old: it supports up to CUDA {}, this build needs {}: update the "
                       "driver (or build sluice with an older CUDA toolkit){}",
                       cuda_version_text(p.driver_version), runtime, raw);
  // cudaErrorNoDevice = 100; a driver without device nodes cannot reach a GPU either.
  if (p.error == 100 || !p.device_nodes)
    return fmt::format("the NVIDIA driver{} is installed but no NVIDIA GPU is visible{}: check that the machine "
                       "(or container: --gpus) has one; sluice computes on the CPU{}",
                       p.driver_version > 0 ? " (CUDA " + cuda_version_text(p.driver_version) + ")" : "",
                       p.device_nodes ? "" : " (no /dev/nvidiactl: the kernel module is not loaded)", raw);
  return fmt::format("the CUDA runtime cannot use the GPU: {} (driver supports CUDA {}, this build {})",
                     p.error_text, p.driver_version > 0 ? cuda_version_text(p.driver_version) : "?", runtime);
}

CudaReport cuda_report() {
  CudaReport r;
#ifdef SLUICE_HAVE_CUDA
  r.compiled = true;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    r.error = explain_cuda_failure(probe_cuda_driver(e));
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

double pinned_upload_gbps(Backend& be, uint64_t bytes) {
#ifdef SLUICE_HAVE_CUDA
  auto* c = dynamic_cast<CudaBackend*>(&be);
  const int64_t floats = int64_t(bytes / 4);
  if (!c || floats == 0) return 0;
  std::vector<float> host(static_cast<size_t>(floats), 1.0f);
  if (!c->pin_host(host.data(), uint64_t(floats) * 4)) return 0;
  Buffer dst(be, 1, floats);
  std::vector<float> one(1);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    be.download(Tensor(dst).col_range(0, 1), one.data());  // the stream is idle before the clock starts
    const auto t0 = std::chrono::steady_clock::now();
    be.upload(host.data(), dst);
    be.download(Tensor(dst).col_range(0, 1), one.data());  // waits for the copy
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, double(floats) * 4 / s / 1e9);
  }
  c->unpin_host(host.data());
  return best;
#else
  (void)be;
  (void)bytes;
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

}  // namespace sluice
