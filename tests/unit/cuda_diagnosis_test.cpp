// Why no GPU is usable, in words a user can act on: no driver, an old driver,
// a driver without a GPU (the runtime says "CUDA driver version is
// insufficient" for the first two alike).
#include <gtest/gtest.h>

#include "compute/devices.h"

namespace sluice::cuda_diagnosis_test {
namespace {

CudaProbe insufficient_driver() {
  CudaProbe p;
  p.error = 35;  // cudaErrorInsufficientDriver
  p.error_text = "CUDA driver version is insufficient for CUDA runtime version";
  p.runtime_version = 13000;
  return p;
}

TEST(CudaDiagnosis, NoDriverInstalled) {
  const std::string m = explain_cuda_failure(insufficient_driver());
  EXPECT_EQ(m.rfind("no NVIDIA driver is installed (libcuda.so.1 not found, no /dev/nvidiactl)", 0), 0u) << m;
  EXPECT_NE(m.find("supports CUDA 13.0"), std::string::npos) << m;
  EXPECT_NE(m.find("computes on the CPU"), std::string::npos) << m;
  EXPECT_NE(m.find("[CUDA: CUDA driver version is insufficient"), std::string::npos) << m;
}

TEST(CudaDiagnosis, DriverOlderThanTheRuntime) {
  CudaProbe p = insufficient_driver();
  p.driver_library = true;
  p.device_nodes = true;
  p.driver_version = 12040;
  const std::string m = explain_cuda_failure(p);
  EXPECT_EQ(m.rfind("the NVIDIA driver is too old: it supports up to CUDA 12.4, this build needs CUDA 13.0", 0), 0u)
      << m;
}

TEST(CudaDiagnosis, DriverWithoutAGpu) {
  CudaProbe p;
  p.error = 100;  // cudaErrorNoDevice
  p.error_text = "no CUDA-capable device is detected";
  p.runtime_version = 13000;
  p.driver_library = true;
  p.device_nodes = true;
  p.driver_version = 13000;
  const std::string m = explain_cuda_failure(p);
  EXPECT_EQ(m.rfind("the NVIDIA driver (CUDA 13.0) is installed but no NVIDIA GPU is visible:", 0), 0u) << m;
  p.device_nodes = false;  // a container given the library but not the devices
  EXPECT_NE(explain_cuda_failure(p).find("no /dev/nvidiactl: the kernel module is not loaded"), std::string::npos);
}

}  // namespace
}  // namespace sluice::cuda_diagnosis_test
