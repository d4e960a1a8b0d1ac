#include "cli/bench_kernels.h"
#include "cli/json_file.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/devices.h"
#include "compute/tensor.h"
#include "kernels/random_qmatrix.h"
#include <fmt/format.h>

namespace sluice::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kReps = 20;  // launches per timing (enqueued back to back, as a forward pass does)
constexpr int kRounds = 5;  // best of

// Seconds per call of f, f enqueued kReps times between two waits for the device.
template <class F>
double seconds_per_call(Backend& be, Tensor fence, F&& f) {
  std::vector<float> sink(size_t(fence.rows() * fence.cols()));
  f();
  be.download(fence, sink.data());  // waits for the warm-up
  double best = 1e300;
  for (int r = 0; r < kRounds; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kReps; ++i) f();
    be.download(fence, sink.data());
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count() / kReps);
  }
  return best;
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
  const std::string gpu = device < int(rep.devices.size()) ? rep.devices[size_t(device)].name : "?";
  Buffer fence(be, 1, 1);

  // Device memory bandwidth: a 4 GiB device-to-device copy, counting bytes read and written.
  const int64_t copy_floats = int64_t(1) << 30;
  Buffer a(be, 1, copy_floats), b(be, 1, copy_floats);
  const double tcopy = seconds_per_call(be, fence, [&] { be.copy(a, b); });
  const double copy_gbps = 2.0 * double(copy_floats) * 4 / tcopy / 1e9;
  std::printf("sluice bench --kernels --device cuda:%d (%s): device copy %.0f GB/s (read + write, 4 GiB); "
              "best of %d rounds of %d launches\n",
              device, gpu.c_str(), copy_gbps, kRounds, kReps);
  nlohmann::json j = {{"device", fmt::format("cuda:{}", device)}, {"gpu", gpu},
                      {"copy_gbps", copy_gbps},                    {"matvec", nlohmann::json::array()},
                      {"experts", nlohmann::json::array()},        {"batched", nlohmann::json::array()}};

  // Per format: one token through a 7168 x 16384 matrix (weight GB/s); eight routed experts of
  // Kimi K2's shape (gate and up 2048 x 7168, down 7168 x 2048), one token each, in one grouped
  // call as a decode step runs them; 16 and 64 tokens through the big matrix (GFLOP/s).
  const int64_t rows = 7168, cols = 16384, hidden = 7168, inter = 2048, E = 8;
  const std::vector<float> xs = normal_values(64 * cols);
  std::printf("%-6s %12s %9s %14s %9s %11s %11s\n", "format", "matvec GB/s", "% copy", "8 experts GB/s", "% copy",
              "GFLOP/s 16", "GFLOP/s 64");
  for (WeightFormat fmt : {WeightFormat::BF16, WeightFormat::F16, WeightFormat::F32, WeightFormat::FP8_E4M3_BLOCK,
                           WeightFormat::INT4_GROUP, WeightFormat::MXFP4, WeightFormat::INT8_ROW}) {
    double gbps = 0, expert_gbps = 0, gf[2] = {};
    {
      OwnedQMatrix w = make_random_qmatrix(fmt, rows, cols, 42);
      const Matrix m = be.matrix(w.m);
      Buffer x(be, 64, cols), y(be, 64, rows);
      be.upload(xs.data(), x);
      const double t = seconds_per_call(be, fence, [&] { be.matmul(m, x.row_range(0, 1), y.row_range(0, 1)); });
      gbps = double(w.data.size() + w.scale.size()) / t / 1e9;
      int k = 0;
      for (int64_t n : {16, 64}) {
        const double tb = seconds_per_call(be, fence, [&] { be.matmul(m, x.row_range(0, n), y.row_range(0, n)); });
        gf[k++] = 2.0 * double(rows) * double(cols) * double(n) / tb / 1e9;
      }
    }
    {
      std::vector<OwnedQMatrix> owned;
      std::vector<ExpertWeights> experts(E);
      double bytes = 0;
      for (int64_t e = 0; e < E; ++e) {
        for (int part = 0; part < 3; ++part) {
          owned.push_back(part < 2 ? make_random_qmatrix(fmt, inter, hidden, uint64_t(100 + 3 * e + part))
                                   : make_random_qmatrix(fmt, hidden, inter, uint64_t(100 + 3 * e + part)));
          bytes += double(owned.back().data.size() + owned.back().scale.size());
        }
        experts[size_t(e)].gate = be.matrix(owned[size_t(3 * e)].m);
        experts[size_t(e)].up = be.matrix(owned[size_t(3 * e + 1)].m);
        experts[size_t(e)].down = be.matrix(owned[size_t(3 * e + 2)].m);
      }
      std::vector<const ExpertWeights*> ptrs;
      std::vector<int64_t> offsets;
      for (int64_t e = 0; e <= E; ++e) offsets.push_back(e);
      for (const auto& e : experts) ptrs.push_back(&e);
      Buffer x(be, E, hidden), y(be, E, hidden);
      be.upload(xs.data(), x);
      const GatedActivation act;
      const double t = seconds_per_call(be, fence, [&] { be.expert_ffns(ptrs, offsets, act, x, y); });
      expert_gbps = bytes / t / 1e9;
    }
    j["matvec"].push_back({{"format", kernel_format_key(fmt)}, {"rows", rows}, {"cols", cols}, {"gbps", gbps}});
    j["experts"].push_back({{"format", kernel_format_key(fmt)}, {"experts", E}, {"hidden", hidden}, {"intermediate", inter},
                            {"gbps", expert_gbps}});
    for (int k = 0; k < 2; ++k) j["batched"].push_back({{"format", kernel_format_key(fmt)}, {"tokens", k ? 64 : 16}, {"gflops", gf[k]}});
    std::printf("%-6s %12.0f %8.0f%% %14.0f %8.0f%% %11.0f %11.0f\n", kernel_format_key(fmt).c_str(), gbps, 100 * gbps / copy_gbps,
                expert_gbps, 100 * expert_gbps / copy_gbps, gf[0], gf[1]);
    std::fflush(stdout);
  }
  write_json_file(json_out, j);
  return 0;
}

}  // namespace sluice::cli
