// Matrix-vector throughput per weight format (GB/s of weight bytes streamed) for
// every ISA this CPU runs: 192 x 7168 (in L2 for the 4-bit formats: the decode's
// compute rate alone), 2048 x 7168 (a Kimi K2 expert projection, mostly in
// cache) and 32768 x 7168 (streamed from DRAM); and the many-token products
// (2048 x 7168: GFLOP/s, 2 per weight and token) at 4 and 8 tokens (what most of
// a prompt's routed experts get: 512 tokens x 8 of 384 experts is about 11 per
// expert, skewed by the routing), 16 and 64; and XXH3 (the experts' checksum) per
// variant. `sluice bench
// --kernels` is the fuller measurement (DRAM bandwidth, peak GFLOP/s).
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/random_qmatrix.h"
#include "util/thread_pool.h"
#include "util/xxh3.h"

namespace sluice {
namespace {

// Times Y = X W^T for n activation rows on `threads` threads of ISA `isa`
// (random weights of `fmt`, rows x 7168); the weight bytes of W.
int64_t time_rows(benchmark::State& state, WeightFormat fmt, const std::string& isa, int threads, int64_t rows,
                  int64_t n) {
  const int64_t cols = 7168;
  OwnedQMatrix w = make_random_qmatrix(fmt, rows, cols, 1);
  std::vector<float> x(size_t(n * cols)), y(static_cast<size_t>(n * rows));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 13) - 6) * 0.125f;
  const std::string prev(kernels::active_isa().name);
  kernels::set_active_isa(isa);
  const kernels::IsaKernels& k = kernels::active_isa();
  ThreadPool pool(threads);
  std::vector<float> xp(size_t(n * k.padded_cols(w.m)));
  k.prepare_x(w.m, x.data(), n, cols, xp.data());
  for (auto _ : state) {
    pool.parallel_for(rows, 16, [&](int64_t b, int64_t e) { k.rows(w.m, b, e, xp.data(), n, y.data(), rows); });
    benchmark::DoNotOptimize(y.data());
  }
  kernels::set_active_isa(prev);
  state.SetLabel(std::string(weight_format_name(fmt)) + " " + isa + " threads=" + std::to_string(threads));
  return int64_t(w.data.size()) + int64_t(w.scale.size());
}

void BM_Matvec(benchmark::State& state, WeightFormat fmt, std::string isa, int threads) {
  const int64_t bytes = time_rows(state, fmt, isa, threads, state.range(0), 1);
  state.SetBytesProcessed(int64_t(state.iterations()) * bytes);
}

void BM_Product(benchmark::State& state, WeightFormat fmt, std::string isa, int threads) {
  const int64_t rows = 2048, n = state.range(0);
  time_rows(state, fmt, isa, threads, rows, n);
  state.counters["GFLOP"] =
      benchmark::Counter(2e-9 * double(rows) * 7168.0 * double(n), benchmark::Counter::kIsIterationInvariantRate);
}

// XXH3-64 (the expert checksum) per variant this CPU runs: bytes/s over a
// buffer in cache (256 KiB) and one streamed from DRAM (256 MiB).
void BM_Xxh3(benchmark::State& state, std::string variant) {
  const std::string before = xxh3::active().name;
  xxh3::select(variant);
  std::vector<uint8_t> b(size_t(state.range(0)), 1);
  for (size_t i = 0; i < b.size(); i += 7) b[i] = uint8_t(i);
  for (auto _ : state) benchmark::DoNotOptimize(xxh3::hash64(b.data(), b.size()));
  xxh3::select(before);
  state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
}

void register_all() {
  for (const xxh3::Impl* impl : xxh3::available())
    benchmark::RegisterBenchmark(("xxh3/" + std::string(impl->name)).c_str(), BM_Xxh3, std::string(impl->name))
        ->UseRealTime()->Arg(256 << 10)->Arg(256 << 20);
  for (const auto& isa : kernels::compiled_isas()) {
    if (!kernels::cpu_supports(isa)) continue;
    for (WeightFormat f : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::F16, WeightFormat::FP8_E4M3_BLOCK,
                           WeightFormat::INT4_GROUP, WeightFormat::MXFP4, WeightFormat::INT8_ROW}) {
      const std::string n = "matvec_x7168/" + std::string(weight_format_name(f)) + "/" + std::string(isa.name);
      if (isa.hwy_target == 0) {
        benchmark::RegisterBenchmark((n + "/t1").c_str(), BM_Matvec, f, std::string(isa.name), 1)->UseRealTime()->Arg(2048);
        continue;
      }
      for (int threads : {1, 2})
        benchmark::RegisterBenchmark((n + "/t" + std::to_string(threads)).c_str(), BM_Matvec, f, std::string(isa.name),
                                     threads)->UseRealTime()->Arg(192)->Arg(2048)->Arg(32768);
      const std::string p = "product_2048x7168/" + std::string(weight_format_name(f)) + "/" + std::string(isa.name);
      for (int threads : {1, 2})
        benchmark::RegisterBenchmark((p + "/t" + std::to_string(threads)).c_str(), BM_Product, f, std::string(isa.name),
                                     threads)->UseRealTime()->Arg(4)->Arg(8)->Arg(16)->Arg(64);
    }
  }
}
const int registered = (register_all(), 0);

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
