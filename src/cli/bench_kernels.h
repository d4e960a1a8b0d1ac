// `sluice bench --kernels`: the compute kernels alone, with the ISA and threads
// the engine would use. Prints a table and optionally writes JSON:
//   {"isa", "threads", "clock_ghz", "fma_per_cycle", "dram_read_gbps",
//    "matvec": [{"format", "rows", "cols", "gbps"}],
//    "batched": [{"format", "tokens", "gflops", "peak_gflops"}],
//    "host_experts": [{"format", "bytes", "rows", "seconds"}]}   (time_host_experts)
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/qmatrix.h"

namespace sluice::cli {

int run_kernels_bench(const std::string& json_out);

// The format names both benchmarks print and write: bf16, f16, f32, fp8, int4, mxfp4, int8.
std::string kernel_format_key(WeightFormat f);

// One routed expert of Kimi K2's shape (gate and up 2048 x 7168, down 7168 x 2048) computed on the
// host's CPU backend over 1, 4 and 16 rows (compute/host_expert_timing.h), as `--experts-on cpu|auto`
// computes experts beside a GPU:
// the best seconds per call of each, and the expert's stored bytes.
struct HostExpertTiming {
  WeightFormat format;
  uint64_t bytes = 0;
  std::vector<std::pair<int64_t, double>> seconds;  // (rows, seconds per call)
};
std::vector<HostExpertTiming> time_host_experts();
// Its rows of the JSON's "host_experts": {"format", "bytes", "rows", "seconds"} per row count.
void add_host_expert_rows(const HostExpertTiming& t, nlohmann::json& rows);

// `sluice bench --kernels --device cuda[:N]`: the CUDA backend's products alone, on the tensor
// cores and on the CUDA cores for each format that has both paths. Prints a table and optionally
// writes JSON:
//   {"device", "gpu", "copy_gbps" (device-to-device copy, bytes read + written),
//    "tensor_peak_tflops" (SMs x clock x dense bf16 FLOP per SM per clock), "f32_exact_peak_tflops"
//    (a third of it: three bf16 MMAs per f32-exact product), "mma_sync_tflops" (measured),
//    "matvec": [{"format", "path", "rows", "cols", "gbps"}],
//    "experts": [{"format", "path", "experts", "hidden", "intermediate", "gbps"}],  (one grouped call, one token each)
//    "batched": [{"format", "path", "tokens", "gflops"}],   (16, 64 and 512 tokens)
//    "pinned_upload_gbps", "host_experts": [{"format", "bytes", "rows", "seconds"}],
//    "host_expert_crossover": [{"format", "rows", "rows_with_margin"}]}   (the fewest rows at which the host is
//    slower than the copy at that rate, 0: never of those measured; compute/host_experts.h host_expert_max_rows,
//    alone and with engine/expert_placement.h's margin)
int run_gpu_kernels_bench(int device, const std::string& json_out);

}  // namespace sluice::cli
