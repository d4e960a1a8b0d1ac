// Matrix-vector throughput per weight format (GB/s of weight bytes streamed),
// SIMD and scalar: 2048 x 7168 (a Kimi K2 expert projection, mostly in cache)
// and 32768 x 7168 (streamed from DRAM).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/matmul.h"
#include "util/numeric.h"
#include "util/thread_pool.h"

namespace sluice {
namespace {

struct Weights {
  std::vector<uint8_t> data, scale;
  QMatrix m;
};

Weights make(WeightFormat fmt, int64_t rows, int64_t cols) {
  Weights w;
  std::mt19937 rng(1);
  QMatrix& m = w.m;
  m.fmt = fmt;
  m.rows = rows;
  m.cols = cols;
  int64_t bytes_per_row = 0, scales = 0, scale_size = 0;
  switch (fmt) {
    case WeightFormat::F32: bytes_per_row = cols * 4; break;
    case WeightFormat::BF16:
    case WeightFormat::F16: bytes_per_row = cols * 2; break;
    case WeightFormat::FP8_E4M3_BLOCK:
      bytes_per_row = cols;
      m.scale_stride = (cols + 127) / 128;
      scales = ((rows + 127) / 128) * m.scale_stride;
      scale_size = 4;
      break;
    case WeightFormat::INT4_GROUP:
      bytes_per_row = cols / 2;
      m.scale_stride = cols / 32;
      scales = rows * m.scale_stride;
      scale_size = 2;
      break;
    case WeightFormat::MXFP4:
      bytes_per_row = cols / 2;
      m.scale_stride = cols / 32;
      scales = rows * m.scale_stride;
      scale_size = 1;
      break;
    case WeightFormat::INT8_ROW:
      bytes_per_row = cols;
      scales = rows;
      scale_size = 4;
      break;
  }
  m.row_bytes = bytes_per_row;
  w.data.resize(size_t(rows * bytes_per_row));
  for (auto& b : w.data) b = uint8_t(rng() & 0x3f);  // small finite values in every format
  w.scale.resize(size_t(scales * scale_size));
  for (size_t i = 0; i < w.scale.size(); ++i) w.scale[i] = scale_size == 1 ? 120 : (int64_t(i % size_t(scale_size)) == scale_size - 1 ? 0x3c : 0);
  m.data = w.data.data();
  m.scale = w.scale.data();
  return w;
}

void BM_Matvec(benchmark::State& state, WeightFormat fmt, bool simd, int threads) {
  const int64_t rows = state.range(0), cols = 7168;
  Weights w = make(fmt, rows, cols);
  std::vector<float> x(size_t(cols), 0.5f), y(static_cast<size_t>(rows));
  kernels::set_simd_enabled(simd);
  ThreadPool pool(threads);
  for (auto _ : state) {
    pool.parallel_for(rows, 16, [&](int64_t b, int64_t e) {
      (simd && kernels::cpu_has_avx512() ? kernels::matmul_rows_avx512 : kernels::matmul_rows_ref)(
          w.m, b, e, x.data(), 1, cols, y.data(), rows);
    });
    benchmark::DoNotOptimize(y.data());
  }
  kernels::set_simd_enabled(true);
  state.SetBytesProcessed(int64_t(state.iterations()) * (int64_t(w.data.size()) + int64_t(w.scale.size())));
  state.SetLabel(std::string(weight_format_name(fmt)) + (simd ? " avx512" : " scalar") + " threads=" +
                 std::to_string(threads));
}

void register_all() {
  for (WeightFormat f : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::F16, WeightFormat::FP8_E4M3_BLOCK,
                         WeightFormat::INT4_GROUP, WeightFormat::MXFP4, WeightFormat::INT8_ROW}) {
    const std::string n(weight_format_name(f));
    for (int threads : {1, 2}) {
      benchmark::RegisterBenchmark(("matvec_x7168/" + n + "/avx512/t" + std::to_string(threads)).c_str(), BM_Matvec, f,
                                   true, threads)->UseRealTime()->Arg(2048)->Arg(32768);
    }
    benchmark::RegisterBenchmark(("matvec_x7168/" + n + "/scalar/t1").c_str(), BM_Matvec, f, false, 1)->UseRealTime()->Arg(2048);
  }
}
const int registered = (register_all(), 0);

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
