// A stand-alone harness for the tensor-core products of compute/cuda/cuda_matmul_tc.cu (no other
// dependency than the CUDA toolkit, so it builds on a GPU machine without the project's packages):
// for every weight format, random matrices of decode shapes, it checks that the streaming small-n
// kernel gives the round-by-round kernel's bits for 1-8 activation rows and that a batch gives
// each row's one-row bits, then times both for one row (GB/s of weights and scales read, beside
// the device-to-device copy rate). Build and run on the GPU machine:
//   nvcc -O3 -std=c++20 -arch=sm_90 -I src bench/cuda_tc_harness.cu src/compute/cuda/cuda_matmul_tc.cu -o tc_harness
//   ./tc_harness            # exit status 1 on a mismatch
// Measured on an H100 (2026-12-07, device copy 3035 GB/s read + write), n=1, us, streaming / round:
// int4 2048x7168 29.4 / 24.6, 4096x18432 99.8 / 67.1, 7168x2048 12.0 / 14.3, 7168x16384 93.2 / 92.7;
// mxfp4 30.7 / 23.7, 97.7 / 66.0, 12.0 / 15.1, 95.1 / 101.7; bf16 30.9 / 21.4, 108 / 84.7, 13.2 / 15.5,
// 111 / 134 (two runs each, within 2%). The streaming kernel has one block per 16 (4-bit: 32) rows
// (64-256 blocks for 2048-4096 rows on 132 SMs, each walking all the columns); the round kernel
// also splits the columns and wins there; with 7168 rows streaming wins. Same bits every time (0
// mismatches), so a choice by shape would change no result (not made yet: untested in the engine).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "compute/cuda/cuda_kernels.h"

using sluice::QMatrix;
using sluice::WeightFormat;
namespace sc = sluice::cuda;

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                      \
    }                                                                                    \
  } while (0)

struct DevMatrix {
  QMatrix W;
  void* data = nullptr;
  void* scale = nullptr;
  size_t bytes = 0, scale_bytes = 0;
};

static DevMatrix make_matrix(WeightFormat f, int64_t M, int64_t K, std::mt19937& rng) {
  DevMatrix d;
  QMatrix& W = d.W;
  W.fmt = f;
  W.rows = M;
  W.cols = K;
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<uint8_t> data;
  std::vector<uint8_t> scale;
  auto put_scale = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    scale.insert(scale.end(), b, b + n);
  };
  switch (f) {
    case WeightFormat::BF16:
      W.row_bytes = K * 2;
      data.resize(size_t(M) * W.row_bytes);
      for (size_t i = 0; i < data.size() / 2; ++i) {
        const float v = nd(rng);
        uint32_t u;
        std::memcpy(&u, &v, 4);
        const uint16_t h = uint16_t(u >> 16);
        std::memcpy(&data[2 * i], &h, 2);
      }
      break;
    case WeightFormat::FP8_E4M3_BLOCK: {
      W.row_bytes = K;
      data.resize(size_t(M) * K);
      for (auto& b : data) {
        int v = byte(rng);
        if ((v & 0x7F) == 0x7F) v ^= 1;  // no NaN
        b = uint8_t(v);
      }
      W.block = 128;
      W.scale_stride = (K + 127) / 128;
      for (int64_t i = 0; i < (M + 127) / 128 * W.scale_stride; ++i) {
        const float s = std::ldexp(1.0f + 0.1f * float(byte(rng)) / 255.0f, -8);
        put_scale(&s, 4);
      }
      break;
    }
    case WeightFormat::INT8_ROW:
      W.row_bytes = K;
      data.resize(size_t(M) * K);
      for (auto& b : data) b = uint8_t(byte(rng));
      for (int64_t i = 0; i < M; ++i) {
        const float s = 0.001f * (1.0f + float(byte(rng)) / 255.0f);
        put_scale(&s, 4);
      }
      break;
    case WeightFormat::INT4_GROUP:
      W.row_bytes = K / 2;
      data.resize(size_t(M) * W.row_bytes);
      for (auto& b : data) b = uint8_t(byte(rng));
      W.group = 32;
      W.scale_stride = K / 32;
      for (int64_t i = 0; i < M * W.scale_stride; ++i) {
        const float v = 0.01f * (1.0f + float(byte(rng)) / 255.0f);
        uint32_t u;
        std::memcpy(&u, &v, 4);
        const uint16_t h = uint16_t(u >> 16);
        put_scale(&h, 2);
      }
      break;
    case WeightFormat::MXFP4:
      W.row_bytes = K / 2;
      data.resize(size_t(M) * W.row_bytes);
      for (auto& b : data) b = uint8_t(byte(rng));
      W.scale_stride = K / 32;
      for (int64_t i = 0; i < M * W.scale_stride; ++i) {
        const uint8_t e = uint8_t(118 + byte(rng) % 8);
        put_scale(&e, 1);
      }
      break;
    default:
      std::abort();
  }
  d.bytes = data.size();
  d.scale_bytes = scale.size();
  CK(cudaMalloc(&d.data, d.bytes));
  CK(cudaMemcpy(d.data, data.data(), d.bytes, cudaMemcpyHostToDevice));
  if (!scale.empty()) {
    CK(cudaMalloc(&d.scale, d.scale_bytes));
    CK(cudaMemcpy(d.scale, scale.data(), d.scale_bytes, cudaMemcpyHostToDevice));
  }
  W.data = static_cast<const uint8_t*>(d.data);
  W.scale = d.scale;
  return d;
}

static const char* name(WeightFormat f) {
  switch (f) {
    case WeightFormat::BF16: return "bf16";
    case WeightFormat::FP8_E4M3_BLOCK: return "fp8";
    case WeightFormat::INT8_ROW: return "int8";
    case WeightFormat::INT4_GROUP: return "int4";
    case WeightFormat::MXFP4: return "mxfp4";
    default: return "?";
  }
}

static std::vector<float> run(const QMatrix& W, const float* dX, int64_t n, float* dY) {
  CK(cudaMemset(dY, 0xFF, size_t(n) * W.rows * 4));
  const int e = sc::tc_matmul(W, dX, n, W.cols, dY, W.rows, nullptr);
  if (e) {
    std::fprintf(stderr, "tc_matmul: %s\n", cudaGetErrorString(cudaError_t(e)));
    std::exit(2);
  }
  CK(cudaDeviceSynchronize());
  std::vector<float> y(size_t(n) * W.rows);
  CK(cudaMemcpy(y.data(), dY, y.size() * 4, cudaMemcpyDeviceToHost));
  return y;
}

static double time_ms(const QMatrix& W, const float* dX, int64_t n, float* dY, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) sc::tc_matmul(W, dX, n, W.cols, dY, W.rows, nullptr);
  CK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) sc::tc_matmul(W, dX, n, W.cols, dY, W.rows, nullptr);
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  return ms / reps;
}

// --profile FMT M K N: that one product, five times (for a profiler; SLUICE_CUDA_TC_LARGE picks the
// large-n kernel), and its time.
static int profile(int argc, char** argv) {
  if (argc < 6) return 2;
  WeightFormat f = WeightFormat::BF16;
  for (WeightFormat c : {WeightFormat::BF16, WeightFormat::FP8_E4M3_BLOCK, WeightFormat::INT8_ROW,
                         WeightFormat::INT4_GROUP, WeightFormat::MXFP4})
    if (std::strcmp(argv[2], name(c)) == 0) f = c;
  const int64_t M = std::atol(argv[3]), K = std::atol(argv[4]), n = std::atol(argv[5]);
  std::mt19937 rng(7);
  DevMatrix m = make_matrix(f, M, K, rng);
  std::vector<float> x(size_t(n) * K);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : x) v = nd(rng);
  float *dX, *dY;
  CK(cudaMalloc(&dX, x.size() * 4));
  CK(cudaMalloc(&dY, size_t(n) * M * 4));
  CK(cudaMemcpy(dX, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  const double ms = time_ms(m.W, dX, n, dY, 2);
  std::printf("%s %ldx%ld n=%ld variant %d: %.1f us %.1f TFLOP/s\n", name(f), long(M), long(K), long(n),
              sc::large_products_variant(), ms * 1e3, 2.0 * M * K * n / (ms * 1e-3) / 1e12);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--profile") == 0) return profile(argc, argv);
  const bool timing = !(argc > 1 && std::strcmp(argv[1], "--check") == 0);
  std::mt19937 rng(7);
  int failures = 0;
  // Copy rate: read + write of 1 GiB.
  double copy_gbs = 0;
  {
    void *a, *b;
    const size_t B = size_t(1) << 30;
    CK(cudaMalloc(&a, B));
    CK(cudaMalloc(&b, B));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaMemcpy(b, a, B, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e0));
    for (int i = 0; i < 5; ++i) CK(cudaMemcpyAsync(b, a, B, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    copy_gbs = 2.0 * 5 * B / (ms * 1e-3) / 1e9;
    CK(cudaFree(a));
    CK(cudaFree(b));
    std::printf("device copy (read + write): %.0f GB/s\n", copy_gbs);
  }
  const WeightFormat formats[] = {WeightFormat::BF16, WeightFormat::FP8_E4M3_BLOCK, WeightFormat::INT8_ROW,
                                  WeightFormat::INT4_GROUP, WeightFormat::MXFP4};
  struct Shape {
    int64_t M, K;
  };
  const Shape shapes[] = {{7168, 16384}, {2048, 7168}, {7168, 2048}, {4096, 18432}, {200, 320}};
  for (WeightFormat f : formats)
    for (const Shape& sh : shapes) {
      if (f == WeightFormat::FP8_E4M3_BLOCK && sh.K % 64) continue;
      DevMatrix m = make_matrix(f, sh.M, sh.K, rng);
      if (!sc::tc_eligible(m.W)) {
        std::printf("%s %ldx%ld not eligible\n", name(f), long(sh.M), long(sh.K));
        continue;
      }
      const int64_t NMAX = 8;
      std::vector<float> x(size_t(NMAX) * sh.K);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * std::ldexp(1.0f, int(i % 13) - 6);
      float *dX, *dY;
      CK(cudaMalloc(&dX, x.size() * 4));
      CK(cudaMalloc(&dY, size_t(NMAX) * sh.M * 4));
      CK(cudaMemcpy(dX, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
      // Bits: streaming vs round kernel, each row count; batch vs one row.
      std::vector<std::vector<float>> one(NMAX);
      sc::set_streaming_small_products(1);
      for (int64_t t = 0; t < NMAX; ++t) one[t] = run(m.W, dX + t * sh.K, 1, dY);
      for (int64_t n = 1; n <= NMAX; ++n) {
        sc::set_streaming_small_products(1);
        const std::vector<float> ys = run(m.W, dX, n, dY);
        sc::set_streaming_small_products(0);
        const std::vector<float> yr = run(m.W, dX, n, dY);
        sc::set_streaming_small_products(1);
        if (std::memcmp(ys.data(), yr.data(), ys.size() * 4) != 0) {
          size_t i = 0;
          while (std::memcmp(&ys[i], &yr[i], 4) == 0) ++i;
          std::printf("MISMATCH %s %ldx%ld n=%ld stream vs round at [%zu]: %.9g vs %.9g\n", name(f), long(sh.M),
                      long(sh.K), long(n), i, ys[i], yr[i]);
          ++failures;
        }
        for (int64_t t = 0; t < n; ++t)
          if (std::memcmp(ys.data() + t * sh.M, one[t].data(), sh.M * 4) != 0) {
            std::printf("MISMATCH %s %ldx%ld n=%ld row %ld vs alone\n", name(f), long(sh.M), long(sh.K), long(n),
                        long(t));
            ++failures;
            break;
          }
      }
      {  // Large n: every large-kernel variant gives the same bits, and a row equals that token alone.
        const int64_t NL = 512;
        std::vector<float> xl(size_t(NL) * sh.K);
        for (size_t i = 0; i < xl.size(); ++i) xl[i] = nd(rng) * std::ldexp(1.0f, int(i % 11) - 5);
        float *dXL, *dYL;
        CK(cudaMalloc(&dXL, xl.size() * 4));
        CK(cudaMalloc(&dYL, size_t(NL) * sh.M * 4));
        CK(cudaMemcpy(dXL, xl.data(), xl.size() * 4, cudaMemcpyHostToDevice));
        for (const int64_t n : {9, 20, 37, 64, 100, 512}) {
          std::vector<float> got[4];
          for (int v = 0; v < 4; ++v) {
            sc::set_large_products_variant(v);
            got[v] = run(m.W, dXL, n, dYL);
          }
          sc::set_large_products_variant(3);
          if (sc::large_products_variant() != 3) {
            std::printf("the warpgroup kernel cannot run here\n");
            ++failures;
          }
          for (int v = 0; v < 3; ++v)
            if (std::memcmp(got[v].data(), got[3].data(), got[3].size() * 4) != 0) {
              size_t i = 0;
              while (std::memcmp(&got[v][i], &got[3][i], 4) == 0) ++i;
              std::printf("MISMATCH %s %ldx%ld n=%ld variant %d vs pre-split wgmma at [%zu] (token %zu row %zu): %.9g vs %.9g\n",
                          name(f), long(sh.M), long(sh.K), long(n), v, i, i / size_t(sh.M), i % size_t(sh.M), got[v][i],
                          got[3][i]);
              ++failures;
            }
          for (const int64_t t : {int64_t(0), n / 2, n - 1}) {
            const std::vector<float> alone = run(m.W, dXL + t * sh.K, 1, dYL);
            if (std::memcmp(alone.data(), got[3].data() + t * sh.M, sh.M * 4) != 0) {
              std::printf("MISMATCH %s %ldx%ld n=%ld token %ld vs alone\n", name(f), long(sh.M), long(sh.K), long(n),
                          long(t));
              ++failures;
            }
          }
        }
        if (timing) {  // TFLOP/s of the product (2 M K per row), each large variant
          for (const int64_t n : {int64_t(64), NL}) {
            double tv[4];
            for (int v = 0; v < 4; ++v) {
              sc::set_large_products_variant(v);
              tv[v] = time_ms(m.W, dXL, n, dYL, 10);
            }
            sc::set_large_products_variant(3);
            const double fl = 2.0 * sh.M * sh.K * n;
            std::printf("%-6s %6ldx%-6ld n=%-3ld TFLOP/s first %6.1f pipelined %6.1f wgmma %6.1f pre-split %6.1f (%8.1f us)\n",
                        name(f), long(sh.M), long(sh.K), long(n), fl / (tv[0] * 1e-3) / 1e12, fl / (tv[1] * 1e-3) / 1e12,
                        fl / (tv[2] * 1e-3) / 1e12, fl / (tv[3] * 1e-3) / 1e12, tv[3] * 1e3);
          }
        }
        CK(cudaFree(dXL));
        CK(cudaFree(dYL));
      }
      if (timing) {
        const double bytes = double(m.bytes + m.scale_bytes);
        sc::set_streaming_small_products(1);
        const double ts = time_ms(m.W, dX, 1, dY, 50);
        const double ts8 = time_ms(m.W, dX, 8, dY, 50);
        sc::set_streaming_small_products(0);
        const double tr = time_ms(m.W, dX, 1, dY, 50);
        sc::set_streaming_small_products(2);
        const double ta = time_ms(m.W, dX, 1, dY, 50);
        std::printf("%-6s %6ldx%-6ld n=1 stream %7.1f us %6.0f GB/s (%4.1f%% of copy) | round %7.1f us %6.0f GB/s | auto %7.1f us (%4.1f%% of copy) | n=8 stream %7.1f us\n",
                    name(f), long(sh.M), long(sh.K), ts * 1e3, bytes / (ts * 1e-3) / 1e9,
                    100.0 * bytes / (ts * 1e-3) / 1e9 / copy_gbs, tr * 1e3, bytes / (tr * 1e-3) / 1e9, ta * 1e3,
                    100.0 * bytes / (ta * 1e-3) / 1e9 / copy_gbs, ts8 * 1e3);
      }
      CK(cudaFree(dX));
      CK(cudaFree(dY));
      CK(cudaFree(m.data));
      if (m.scale) CK(cudaFree(m.scale));
    }
  std::printf("%s: %d mismatches\n", failures ? "FAILED" : "passed", failures);
  return failures ? 1 : 0;
}
