// `sluice bench --kernels`: the compute kernels alone, with the ISA and threads
// the engine would use. Prints a table and optionally writes JSON:
//   {"isa", "threads", "clock_ghz", "fma_per_cycle", "dram_read_gbps",
//    "matvec": [{"format", "rows", "cols", "gbps"}],
//    "batched": [{"format", "tokens", "gflops", "peak_gflops"}]}
#pragma once
#include <string>

namespace sluice::cli {

int run_kernels_bench(const std::string& json_out);

}  // namespace sluice::cli
