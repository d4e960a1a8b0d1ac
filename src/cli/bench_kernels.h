// `sluice bench --kernels`: the compute kernels alone, with the ISA and threads
// the engine would use. Prints a table and optionally writes JSON:
//   {"isa", "threads", "clock_ghz", "fma_per_cycle", "dram_read_gbps",
//    "matvec": [{"format", "rows", "cols", "gbps"}],
//    "batched": [{"format", "tokens", "gflops", "peak_gflops"}]}
#pragma once
#include <string>

#include "kernels/qmatrix.h"

namespace sluice::cli {

int run_kernels_bench(const std::string& json_out);

// The format names both benchmarks print and write: bf16, f16, f32, fp8, int4, mxfp4, int8.
std::string kernel_format_key(WeightFormat f);

// `sluice bench --kernels --device cuda[:N]`: the CUDA backend's products alone, on the tensor
// cores and on the CUDA cores for each format that has both paths. Prints a table and optionally
// writes JSON:
//   {"device", "gpu", "copy_gbps" (device-to-device copy, bytes read + written),
//    "tensor_peak_tflops" (SMs x clock x dense bf16 FLOP per SM per clock), "f32_exact_peak_tflops"
//    (a third of it: three bf16 MMAs per f32-exact product), "mma_sync_tflops" (measured),
//    "matvec": [{"format", "path", "rows", "cols", "gbps"}],
//    "experts": [{"format", "path", "experts", "hidden", "intermediate", "gbps"}],  (one grouped call, one token each)
//    "batched": [{"format", "path", "tokens", "gflops"}]}   (16, 64 and 512 tokens)
int run_gpu_kernels_bench(int device, const std::string& json_out);

}  // namespace sluice::cli
