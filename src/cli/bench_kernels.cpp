#include "cli/bench_kernels.h"
#include "cli/json_file.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/backend.h"
#include "compute/host_expert_timing.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/random_qmatrix.h"
#include "util/cache_size.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace sluice::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kReps = 7;  // every figure is the best of kReps timed runs after a warm-up

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

template <class F>
double best_seconds(int reps, F&& f) {
  f();  // warm-up (page faults, first-use tables)
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

// Core clock from a chain of dependent integer adds (one per cycle on every
// core this targets), so turbo and virtualisation are measured, not assumed.
double measure_clock_ghz() {
#if defined(__x86_64__) || defined(__aarch64__)
  const uint64_t iters = 2'000'000;
  double best = 1e300;
  for (int rep = 0; rep < 5; ++rep) {
    uint64_t x = 0, n = iters;
    const auto t0 = Clock::now();
#if defined(__x86_64__)
    asm volatile(
        "1:\n"
        ".rept 50\n add $1, %0\n .endr\n"
        "dec %1\n jnz 1b\n"
        : "+r"(x), "+r"(n));
#else
    asm volatile(
        "1:\n"
        ".rept 50\n add %0, %0, #1\n .endr\n"
        "subs %1, %1, #1\n b.ne 1b\n"
        : "+r"(x), "+r"(n)
        :
        : "cc");
#endif
    best = std::min(best, seconds_since(t0));
  }
  return double(iters) * 50 / best / 1e9;
#else
  return 0.0;
#endif
}

// Vector FMAs one core retires per cycle at this ISA's width, from 12
// independent chains (kernels::IsaKernels::fma_chains) timed against the
// measured clock: 2 on Zen 3 (AVX2) and Intel server cores, 1 on Zen 4 at
// 512 bits. Rounded to a half: the clock measurement is itself a little noisy.
double measure_fma_per_cycle(const kernels::IsaKernels& isa, double ghz) {
  if (ghz <= 0) return isa.hwy_target == 0 ? 1 : 2;
  constexpr int64_t kIters = 4'000'000;
  volatile float sink = 0;
  const double t = best_seconds(5, [&] { sink = sink + isa.fma_chains(1.0f, kIters); });
  const double per_cycle = double(12 * kIters) / (t * ghz * 1e9);
  return std::max(0.5, std::round(per_cycle * 2) / 2);
}

// Streaming read of a buffer much larger than the last-level cache, split over
// the pool's threads like the products are.
double dram_read_gbps(const kernels::IsaKernels& isa, size_t& bytes_out) {
  const size_t bytes = std::max<size_t>(8 * last_level_cache_bytes(), size_t(256) << 20);
  bytes_out = bytes;
  std::vector<float> buf(bytes / 4, 1.0f);
  std::vector<float> sink(256);
  ThreadPool& pool = ThreadPool::global();
  constexpr int64_t kBlock = 1 << 18;  // floats
  const int64_t blocks = int64_t(buf.size()) / kBlock;
  const double t = best_seconds(kReps, [&] {
    pool.parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
      sink[size_t(b % 256)] += isa.read_sum(buf.data() + b * kBlock, (e - b) * kBlock);
    });
  });
  return double(blocks * kBlock * 4) / t / 1e9;
}

constexpr WeightFormat kFormats[] = {WeightFormat::BF16,       WeightFormat::F16,   WeightFormat::F32,
                                     WeightFormat::FP8_E4M3_BLOCK, WeightFormat::INT4_GROUP,
                                     WeightFormat::MXFP4,      WeightFormat::INT8_ROW};

}  // namespace

std::string kernel_format_key(WeightFormat f) {
  switch (f) {
    case WeightFormat::FP8_E4M3_BLOCK: return "fp8";
    case WeightFormat::INT4_GROUP: return "int4";
    case WeightFormat::INT8_ROW: return "int8";
    default: return std::string(weight_format_name(f));
  }
}

std::vector<HostExpertTiming> time_host_experts() {
  const int64_t hidden = 7168, inter = 2048;
  const int64_t rows[] = {1, 4, 16};
  std::vector<HostExpertTiming> out;
  for (WeightFormat fmt : {WeightFormat::BF16, WeightFormat::FP8_E4M3_BLOCK, WeightFormat::INT4_GROUP,
                           WeightFormat::MXFP4, WeightFormat::INT8_ROW}) {
    // Several experts in turn, together twice the last-level cache, so each call reads its
    // expert from DRAM as a routed expert beside a GPU would be (one expert alone may fit in it).
    HostExpertTiming t{fmt, 0, {}};
    std::vector<OwnedQMatrix> owned;
    std::vector<ExpertWeights> experts;
    for (int64_t e = 0, n = 2; e < n; ++e) {
      owned.push_back(make_random_qmatrix(fmt, inter, hidden, 11 + 3 * uint64_t(e)));
      owned.push_back(make_random_qmatrix(fmt, inter, hidden, 12 + 3 * uint64_t(e)));
      owned.push_back(make_random_qmatrix(fmt, hidden, inter, 13 + 3 * uint64_t(e)));
      t.bytes = 0;
      for (size_t k = owned.size() - 3; k < owned.size(); ++k)
        t.bytes += uint64_t(owned[k].data.size() + owned[k].scale.size());
      n = copies_beyond_cache(t.bytes);
      experts.emplace_back();
    }
    for (size_t e = 0; e < experts.size(); ++e) {
      experts[e].gate = host_matrix(owned[3 * e].m);
      experts[e].up = host_matrix(owned[3 * e + 1].m);
      experts[e].down = host_matrix(owned[3 * e + 2].m);
    }
    t.seconds = time_expert_rows(cpu_backend(), experts, rows, kReps);
    out.push_back(std::move(t));
  }
  return out;
}

void add_host_expert_rows(const HostExpertTiming& t, nlohmann::json& rows) {
  for (const auto& [n, sec] : t.seconds)
    rows.push_back({{"format", kernel_format_key(t.format)}, {"bytes", t.bytes}, {"rows", n}, {"seconds", sec}});
}

int run_kernels_bench(const std::string& json_out) {
  const kernels::IsaKernels& isa = kernels::active_isa();
  const int threads = ThreadPool::global().size();
  const double ghz = measure_clock_ghz();
  const double fma_per_cycle = measure_fma_per_cycle(isa, ghz);
  const double peak = double(threads) * ghz * fma_per_cycle * isa.lanes * 2;
  size_t dram_bytes = 0;
  const double dram = dram_read_gbps(isa, dram_bytes);
  std::printf("sluice bench --kernels: isa %s, %d threads, clock %.2f GHz, peak %.1f GFLOP/s (%.1f FMA/cycle measured x %d lanes), "
              "DRAM read %.2f GB/s (%.0f MiB buffer); best of %d runs\n",
              std::string(isa.name).c_str(), threads, ghz, peak, fma_per_cycle, isa.lanes, dram,
              double(dram_bytes) / (1 << 20), kReps);
  nlohmann::json j = {{"isa", isa.name},       {"threads", threads}, {"clock_ghz", ghz},
                      {"fma_per_cycle", fma_per_cycle}, {"dram_read_gbps", dram},
                      {"matvec", nlohmann::json::array()}, {"batched", nlohmann::json::array()}};
  const int64_t rows = 7168, cols = 16384;
  std::printf("%-6s %12s %9s %10s %14s %14s\n", "format", "matvec GB/s", "% DRAM", "GFLOP/s 16", "GFLOP/s 64",
              "% peak (64)");
  for (WeightFormat fmt : kFormats) {
    OwnedQMatrix w = make_random_qmatrix(fmt, rows, cols, 42);
    const double wbytes = double(w.data.size() + w.scale.size());
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> X(size_t(64 * cols)), Y(size_t(64 * rows));
    for (auto& v : X) v = normal(rng);
    const double tv = best_seconds(kReps, [&] { matvec(w.m, X.data(), Y.data()); });
    const double gbps = wbytes / tv / 1e9;
    j["matvec"].push_back({{"format", kernel_format_key(fmt)}, {"rows", rows}, {"cols", cols}, {"gbps", gbps}});
    double gf[2] = {};
    int k = 0;
    for (int64_t n : {16, 64}) {
      const double tb = best_seconds(3, [&] { matmul(w.m, X.data(), n, cols, Y.data(), rows); });
      gf[k] = 2.0 * double(rows) * double(cols) * double(n) / tb / 1e9;
      j["batched"].push_back({{"format", kernel_format_key(fmt)}, {"tokens", n}, {"gflops", gf[k]}, {"peak_gflops", peak}});
      ++k;
    }
    std::printf("%-6s %12.2f %8.0f%% %10.1f %14.1f %13.0f%%\n", kernel_format_key(fmt).c_str(), gbps, 100 * gbps / dram,
                gf[0], gf[1], peak > 0 ? 100 * gf[1] / peak : 0.0);
    std::fflush(stdout);
  }
  // Routed experts on the host beside a GPU (--experts-on cpu|auto): what one costs here; the GPU
  // benchmark sets it against its measured copy rate.
  std::printf("host experts (one 2048 x 7168 expert of Kimi K2's shape on the CPU backend, as --experts-on computes "
              "them beside a GPU):\n%-6s %9s %10s %10s %10s %12s\n",
              "format", "MB", "ms 1 row", "ms 4 rows", "ms 16 rows", "GB/s 1 row");
  j["host_experts"] = nlohmann::json::array();
  for (const HostExpertTiming& t : time_host_experts()) {
    add_host_expert_rows(t, j["host_experts"]);
    std::printf("%-6s %9.1f %10.3f %10.3f %10.3f %12.2f\n", kernel_format_key(t.format).c_str(), double(t.bytes) / 1e6,
                1e3 * t.seconds[0].second, 1e3 * t.seconds[1].second, 1e3 * t.seconds[2].second,
                double(t.bytes) / t.seconds[0].second / 1e9);
  }
  write_json_file(json_out, j);
  return 0;
}

}  // namespace sluice::cli
