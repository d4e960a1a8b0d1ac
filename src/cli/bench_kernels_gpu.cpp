#include "cli/bench_kernels.h"
#include "cli/json_file.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/devices.h"
#include "compute/host_experts.h"
#include "engine/expert_placement.h"
#include "compute/tensor.h"
#include "kernels/random_qmatrix.h"
#include <fmt/format.h>

namespace sluice::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMaxLaunches = 20;  // launches per timing (enqueued back to back, as a forward pass does)
constexpr int kRounds = 5;  // best of

// Seconds per call of f, f enqueued back to back between two waits for the device: kMaxLaunches times,
// fewer for a call that takes milliseconds (about 50 ms a round).
template <class F>
double seconds_per_call(Backend& be, Tensor fence, F&& f) {
  std::vector<float> sink(size_t(fence.rows() * fence.cols()));
  auto t0 = Clock::now();
  f();
  be.download(fence, sink.data());  // waits for the warm-up
  const double first = std::chrono::duration<double>(Clock::now() - t0).count();
  const int reps = std::clamp(int(0.05 / std::max(first, 1e-9)), 1, kMaxLaunches);
  double best = 1e300;
  for (int r = 0; r < kRounds; ++r) {
    t0 = Clock::now();
    for (int i = 0; i < reps; ++i) f();
    be.download(fence, sink.data());
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count() / reps);
  }
  return best;
}

// Dense bf16 tensor-core FLOP per multiprocessor per clock by architecture (the vendor's dense
// rates over SMs x boost clock): Hopper 4096, A100 2048, other Ampere/Ada (f32 accumulation) 512.
int tensor_flop_per_sm_clock(int cc_major, int cc_minor) {
  if (cc_major >= 9) return 4096;
  if (cc_major == 8 && cc_minor == 0) return 2048;
  if (cc_major == 8) return 512;
  return 0;
}

std::vector<float> normal_values(int64_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

int run_gpu_kernels_bench(int device, const std::string& json_out) {
  Backend& be = backend_for_device(true, device);
  const CudaReport rep = cuda_report();
  const GpuInfo info = device < int(rep.devices.size()) ? rep.devices[size_t(device)] : GpuInfo{};
  const std::string gpu = info.name.empty() ? "?" : info.name;
  Buffer fence(be, 1, 1);

  // Device memory bandwidth: a 4 GiB device-to-device copy, counting bytes read and written.
  const int64_t copy_floats = int64_t(1) << 30;
  double copy_gbps = 0;
  {
    Buffer a(be, 1, copy_floats), b(be, 1, copy_floats);
    const double tcopy = seconds_per_call(be, fence, [&] { be.copy(a, b); });
    copy_gbps = 2.0 * double(copy_floats) * 4 / tcopy / 1e9;
  }
  std::printf("sluice bench --kernels --device cuda:%d (%s): device copy %.0f GB/s (read + write, 4 GiB); "
              "best of %d rounds of up to %d launches\n",
              device, gpu.c_str(), copy_gbps, kRounds, kMaxLaunches);
  // The tensor cores' dense bf16 peak from the device's numbers, and what is left of it for
  // products that keep f32 accuracy (three bf16 MMAs per product: the activation in three parts).
  const int per_clock = tensor_flop_per_sm_clock(info.cc_major, info.cc_minor);
  const double tc_peak = double(info.multiprocessors) * info.clock_khz * 1e3 * per_clock / 1e12;
  const double exact_peak = tc_peak / 3;
  const double mma_rate = cuda_mma_rate_tflops(device);
  std::printf("tensor cores: %d SMs x %.3f GHz x %d bf16 FLOP/clock = %.0f TFLOP/s dense bf16; f32-exact products "
              "(3 bf16 MMAs each) at most %.0f TFLOP/s; independent mma.sync chains measured %.0f TFLOP/s (/3 = %.0f)\n",
              info.multiprocessors, info.clock_khz / 1e6, per_clock, tc_peak, exact_peak, mma_rate, mma_rate / 3);
  nlohmann::json j = {{"device", fmt::format("cuda:{}", device)},
                      {"gpu", gpu},
                      {"copy_gbps", copy_gbps},
                      {"tensor_peak_tflops", tc_peak},
                      {"f32_exact_peak_tflops", exact_peak},
                      {"mma_sync_tflops", mma_rate},
                      {"matvec", nlohmann::json::array()},
                      {"experts", nlohmann::json::array()},
                      {"batched", nlohmann::json::array()}};

  // Per format and product path (tensor cores where the format has them, CUDA cores): one token
  // through a 7168 x 16384 matrix (weight GB/s); eight routed experts of Kimi K2's shape (gate and
  // up 2048 x 7168, down 7168 x 2048), one token each, in one grouped call as a decode step runs
  // them; 16, 64 and 512 tokens through the big matrix (GFLOP/s).
  const int64_t rows = 7168, cols = 16384, hidden = 7168, inter = 2048, E = 8;
  const std::vector<int64_t> token_counts = {16, 64, 512};
  const std::vector<float> xs = normal_values(512 * cols);
  std::printf("%-6s %-6s %12s %7s %14s %7s %11s %11s %12s %10s\n", "format", "path", "matvec GB/s", "% copy",
              "8 experts GB/s", "% copy", "GFLOP/s 16", "GFLOP/s 64", "GFLOP/s 512", "% f32-peak");
  Buffer x(be, 512, cols), y(be, 512, rows);
  be.upload(xs.data(), x);
  for (WeightFormat fmt : {WeightFormat::BF16, WeightFormat::F16, WeightFormat::F32, WeightFormat::FP8_E4M3_BLOCK,
                           WeightFormat::INT4_GROUP, WeightFormat::MXFP4, WeightFormat::INT8_ROW}) {
    OwnedQMatrix w = make_random_qmatrix(fmt, rows, cols, 42);
    const Matrix m = be.matrix(w.m);
    std::vector<OwnedQMatrix> owned;
    std::vector<ExpertWeights> experts(E);
    double expert_bytes = 0;
    for (int64_t e = 0; e < E; ++e) {
      for (int part = 0; part < 3; ++part) {
        owned.push_back(part < 2 ? make_random_qmatrix(fmt, inter, hidden, uint64_t(100 + 3 * e + part))
                                 : make_random_qmatrix(fmt, hidden, inter, uint64_t(100 + 3 * e + part)));
        expert_bytes += double(owned.back().data.size() + owned.back().scale.size());
      }
      experts[size_t(e)].gate = be.matrix(owned[size_t(3 * e)].m);
      experts[size_t(e)].up = be.matrix(owned[size_t(3 * e + 1)].m);
      experts[size_t(e)].down = be.matrix(owned[size_t(3 * e + 2)].m);
    }
    std::vector<const ExpertWeights*> ptrs;
    std::vector<int64_t> offsets;
    for (int64_t e = 0; e <= E; ++e) offsets.push_back(e);
    for (const auto& e : experts) ptrs.push_back(&e);
    Buffer ex(be, E, hidden), ey(be, E, hidden);
    be.upload(xs.data(), ex);
    const GatedActivation act;
    const bool has_tc = fmt != WeightFormat::F16 && fmt != WeightFormat::F32;
    for (const bool tc : {true, false}) {
      if (tc && !has_tc) continue;
      cuda_tensor_core_products(tc);
      const char* path = tc ? "tensor" : "cuda";
      const double t = seconds_per_call(be, fence, [&] { be.matmul(m, x.row_range(0, 1), y.row_range(0, 1)); });
      const double gbps = double(w.data.size() + w.scale.size()) / t / 1e9;
      const double te = seconds_per_call(be, fence, [&] { be.expert_ffns(ptrs, offsets, act, ex, ey); });
      const double expert_gbps = expert_bytes / te / 1e9;
      std::vector<double> gf;
      for (int64_t n : token_counts) {
        const double tb = seconds_per_call(be, fence, [&] { be.matmul(m, x.row_range(0, n), y.row_range(0, n)); });
        gf.push_back(2.0 * double(rows) * double(cols) * double(n) / tb / 1e9);
      }
      j["matvec"].push_back(
          {{"format", kernel_format_key(fmt)}, {"path", path}, {"rows", rows}, {"cols", cols}, {"gbps", gbps}});
      j["experts"].push_back({{"format", kernel_format_key(fmt)}, {"path", path}, {"experts", E}, {"hidden", hidden},
                              {"intermediate", inter}, {"gbps", expert_gbps}});
      for (size_t k = 0; k < token_counts.size(); ++k)
        j["batched"].push_back({{"format", kernel_format_key(fmt)}, {"path", path}, {"tokens", token_counts[k]},
                                {"gflops", gf[k]}});
      std::printf("%-6s %-6s %12.0f %6.0f%% %14.0f %6.0f%% %11.0f %11.0f %12.0f %9.1f%%\n", kernel_format_key(fmt).c_str(),
                  path, gbps, 100 * gbps / copy_gbps, expert_gbps, 100 * expert_gbps / copy_gbps, gf[0], gf[1], gf[2],
                  exact_peak > 0 ? 100 * gf[2] / 1e3 / exact_peak : 0.0);
      std::fflush(stdout);
    }
    cuda_tensor_core_products(true);
  }
  // Beside the GPU, an expert outside VRAM is either computed on the host or copied over PCIe
  // (--experts-on auto, --host-expert-rows): the host's time per row count against the copy's.
  const double upload = pinned_upload_gbps(be, 64ull << 20);
  std::printf("host -> device copies from pinned memory: %.1f GB/s (64 MiB). Experts of Kimi K2's shape on the host "
              "(CPU backend) against copying them at that rate (--experts-on auto without --host-expert-rows times the "
              "model's own expert and adds x%.1f to the host's time):\n%-6s %9s %10s %10s %10s %10s %-32s %s\n",
              upload, kHostExpertMargin, "format", "MB", "copy ms", "ms 1 row", "ms 4 rows", "ms 16 rows",
              "host slower than the copy from", "with the margin");
  j["pinned_upload_gbps"] = upload;
  j["host_experts"] = nlohmann::json::array();
  j["host_expert_crossover"] = nlohmann::json::array();
  // compute/host_experts.h's bound: the host computes fewer rows than it; past the last count: never slower.
  auto slower_from = [](int64_t bound, int64_t last) {
    return bound > last ? fmt::format("never (of 1, 4, {} rows)", last) : fmt::format("{} rows", bound);
  };
  for (const HostExpertTiming& t : time_host_experts()) {
    add_host_expert_rows(t, j["host_experts"]);
    const int64_t last = t.seconds.back().first;
    const int64_t from = host_expert_max_rows(t.seconds, t.bytes, upload, 1.0);
    const int64_t with_margin = host_expert_max_rows(t.seconds, t.bytes, upload, kHostExpertMargin);
    j["host_expert_crossover"].push_back({{"format", kernel_format_key(t.format)},
                                          {"rows", from > last ? 0 : from},
                                          {"rows_with_margin", with_margin > last ? 0 : with_margin}});
    std::printf("%-6s %9.1f %10.3f %10.3f %10.3f %10.3f %-32s %s\n", kernel_format_key(t.format).c_str(),
                double(t.bytes) / 1e6, upload > 0 ? 1e3 * double(t.bytes) / (upload * 1e9) : 0.0,
                1e3 * t.seconds[0].second, 1e3 * t.seconds[1].second, 1e3 * t.seconds[2].second,
                slower_from(from, last).c_str(), slower_from(with_margin, last).c_str());
  }
  write_json_file(json_out, j);
  return 0;
}

}  // namespace sluice::cli
