// The devices a forward pass can compute on: the CPU, and the CUDA GPUs of a
// build with the CUDA backend (src/compute/cuda). `sluice info` lists them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "compute/backend.h"

namespace sluice {

struct GpuInfo {
  int index = 0;
  std::string name;
  uint64_t free_bytes = 0, total_bytes = 0;
  int cc_major = 0, cc_minor = 0;  // compute capability
  int multiprocessors = 0, clock_khz = 0;  // peak SM clock
};

struct CudaReport {
  bool compiled = false;       // this build has the CUDA backend
  std::vector<GpuInfo> devices;
  std::string error;           // why no device is usable (driver missing, ...), empty when fine
};
CudaReport cuda_report();

// What was found when the CUDA runtime could not list a GPU, to tell a missing
// driver from an old one and from a machine without a GPU.
struct CudaProbe {
  int error = 0;               // the runtime's cudaError_t from cudaGetDeviceCount
  std::string error_text;      // cudaGetErrorString of it
  bool driver_library = false; // libcuda.so.1 (the NVIDIA driver's user-space part) loads
  int driver_version = 0;      // cuDriverGetVersion: the newest CUDA the driver supports (12040: 12.4); 0: unknown
  int runtime_version = 0;     // the CUDA runtime this build carries (13000: 13.0)
  bool device_nodes = false;   // /dev/nvidiactl exists (the kernel module is loaded)
};
// One sentence naming what is wrong and what to do ("no NVIDIA driver is
// installed ...", "the NVIDIA driver supports CUDA 12.4, older than ...", "no
// NVIDIA GPU ..."); the runtime's own text is kept at the end.
std::string explain_cuda_failure(const CudaProbe& p);

// The backend for a device: the CPU, or CUDA device `index` (throws naming it
// when this build or machine has none).
Backend& backend_for_device(bool cuda, int index);

// The tensor-core products of the CUDA backend (compute/cuda/cuda_matmul_tc.cu): a process-wide
// switch for benchmarks that compare them with the CUDA-core products (no-op without CUDA), and
// the rate of independent bf16 mma.sync chains measured on `device` (TFLOP/s; 0 without CUDA).
void cuda_tensor_core_products(bool on);
double cuda_mma_rate_tflops(int device);
// Host -> device copies from page-locked host memory, as the VRAM expert tier copies experts from the
// pinned RAM cache: GB/s over `bytes` on `be` (the best of a few; 0 on the CPU or when pinning fails).
double pinned_upload_gbps(Backend& be, uint64_t bytes);

// Device memory: free now, and taken by weights the backend placed (zeros on the CPU).
struct DeviceMemory {
  uint64_t free = 0, weights = 0;
};
DeviceMemory device_memory(Backend& be);

}  // namespace sluice
