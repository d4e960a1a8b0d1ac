// The CUDA backend against the CPU reference (label `cuda`; needs a GPU, run
// by scripts/test-gpu.sh): every weight format's product, every element-wise
// op and attention core on random data; products bit-identical whatever the
// number of rows; every golden model within 5x the CPU's error of its float64
// reference; batched logits bit-identical to one token at a time; streamed
// experts and a VRAM expert cache that evicts bit-identical to resident ones;
// clear errors for out-of-memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>

#include "compute/cpu/cpu_backend.h"
#include "compute/cuda/cuda_backend.h"
#include "compute/cuda/cuda_kernels.h"
#include "compute/devices.h"
#include "compute/host_experts.h"
#include "engine/engine.h"
#include "experts/vram_tier.h"
#include "kernels/matmul.h"
#include "runtime/session.h"
#include "support/test_support.h"
#include "util/error.h"
#include "util/numeric.h"

namespace sluice {
namespace {

CudaBackend& gpu() { return static_cast<CudaBackend&>(cuda_backend(0)); }
Backend& cpu() { return cpu_backend(); }

std::mt19937& rng() {
  static std::mt19937 r(1234);
  return r;
}
std::vector<float> randn(int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng());
  return v;
}

// A random matrix in a stored format, owning its host bytes.
struct HostMatrix {
  std::vector<uint8_t> data, scale;
  QMatrix q;
};

HostMatrix random_matrix(WeightFormat f, int64_t rows, int64_t cols, int32_t group = 32) {
  HostMatrix m;
  QMatrix& q = m.q;
  q.fmt = f;
  q.rows = rows;
  q.cols = cols;
  std::uniform_int_distribution<int> byte(0, 255);
  auto fill = [&](int64_t n) {
    m.data.resize(size_t(n));
    for (auto& b : m.data) b = uint8_t(byte(rng()));
  };
  switch (f) {
    case WeightFormat::F32: {
      q.row_bytes = cols * 4;
      auto v = randn(rows * cols);
      m.data.resize(v.size() * 4);
      std::memcpy(m.data.data(), v.data(), m.data.size());
      break;
    }
    case WeightFormat::BF16:
    case WeightFormat::F16: {
      q.row_bytes = cols * 2;
      m.data.resize(size_t(rows * cols * 2));
      auto* h = reinterpret_cast<uint16_t*>(m.data.data());
      std::uniform_int_distribution<int> e(10, 18), man(0, 1023), s(0, 1);
      auto v = randn(rows * cols);
      for (int64_t i = 0; i < rows * cols; ++i)
        h[i] = f == WeightFormat::BF16 ? f32_to_bf16(v[size_t(i)])
                                       : uint16_t(s(rng()) << 15 | e(rng()) << 10 | man(rng()));
      break;
    }
    case WeightFormat::FP8_E4M3_BLOCK: {
      q.row_bytes = cols;
      fill(rows * cols);
      for (auto& b : m.data)
        if ((b & 0x7f) == 0x7f) b = 0x11;
      const int64_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
      auto s = randn(br * bc, 0.05f);
      m.scale.resize(s.size() * 4);
      std::memcpy(m.scale.data(), s.data(), m.scale.size());
      q.scale_stride = bc;
      break;
    }
    case WeightFormat::INT4_GROUP: {
      q.row_bytes = cols / 2;
      q.group = group;
      fill(rows * cols / 2);
      q.scale_stride = cols / group;
      m.scale.resize(size_t(rows * q.scale_stride * 2));
      auto* s = reinterpret_cast<uint16_t*>(m.scale.data());
      auto v = randn(rows * q.scale_stride, 0.1f);
      for (size_t i = 0; i < v.size(); ++i) s[i] = f32_to_bf16(v[i]);
      break;
    }
    case WeightFormat::MXFP4: {
      q.row_bytes = cols / 2;
      fill(rows * cols / 2);
      q.scale_stride = cols / 32;
      m.scale.resize(size_t(rows * q.scale_stride));
      std::uniform_int_distribution<int> e(120, 130);
      for (auto& b : m.scale) b = uint8_t(e(rng()));
      break;
    }
    case WeightFormat::INT8_ROW: {
      q.row_bytes = cols;
      fill(rows * cols);
      auto s = randn(rows, 0.01f);
      m.scale.resize(s.size() * 4);
      std::memcpy(m.scale.data(), s.data(), m.scale.size());
      break;
    }
  }
  q.data = m.data.data();
  q.scale = m.scale.empty() ? nullptr : m.scale.data();
  return m;
}

Buffer on(Backend& be, const std::vector<float>& v, int64_t rows, int64_t cols) {
  Buffer b(be, rows, cols);
  be.upload(v.data(), b);
  return b;
}
std::vector<float> values(Backend& be, Tensor t) {
  std::vector<float> v(size_t(t.rows() * t.cols()));
  be.download(t, v.data());
  return v;
}

// Largest |a-b| over the elements relative to the reference's RMS (plus a floor
// for all-but-zero references): f32 rounding in a different order stays ~1e-6.
double max_rel(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-3) {
  EXPECT_EQ(a.size(), b.size());
  double ss = 0, m = 0;
  for (float v : b) ss += double(v) * v;
  const double rms = b.empty() ? 0 : std::sqrt(ss / double(b.size()));
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    m = std::max(m, std::abs(double(a[i]) - b[i]));
  }
  return m / (rms + floor);
}

struct FormatCase {
  WeightFormat f;
  int64_t rows, cols;
  int32_t group;
};

TEST(CudaProducts, EveryFormatMatchesTheCpuAndIsBatchInvariant) {
  const FormatCase cases[] = {
      {WeightFormat::F32, 37, 256, 0},       {WeightFormat::F32, 37, 203, 0},
      {WeightFormat::BF16, 70, 512, 0},      {WeightFormat::BF16, 33, 203, 0},
      {WeightFormat::F16, 19, 136, 0},       {WeightFormat::FP8_E4M3_BLOCK, 300, 384, 0},
      {WeightFormat::FP8_E4M3_BLOCK, 41, 200, 0}, {WeightFormat::INT4_GROUP, 45, 256, 32},
      {WeightFormat::INT4_GROUP, 45, 264, 8},     {WeightFormat::MXFP4, 64, 256, 0},
      {WeightFormat::MXFP4, 9, 96, 0},       {WeightFormat::INT8_ROW, 50, 203, 0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(fmt::format("{} [{}, {}]", weight_format_name(c.f), c.rows, c.cols));
    HostMatrix hm = random_matrix(c.f, c.rows, c.cols, c.group);
    const int64_t n = 13;
    auto x = randn(n * c.cols);
    Matrix wc = cpu().matrix(hm.q), wg = gpu().matrix(hm.q);
    Buffer xc = on(cpu(), x, n, c.cols), xg = on(gpu(), x, n, c.cols);
    Buffer yc(cpu(), n, c.rows), yg(gpu(), n, c.rows);
    cpu().matmul(wc, xc, yc);
    gpu().matmul(wg, xg, yg);
    auto want = values(cpu(), yc), got = values(gpu(), yg);
    EXPECT_LT(max_rel(got, want, 1e-2), 1e-4);
    // Each row alone gives the same bits as inside the batch.
    for (int64_t i = 0; i < n; i += 4) {
      Buffer y1(gpu(), 1, c.rows);
      gpu().matmul(wg, xg.row_range(i, 1), y1);
      auto one = values(gpu(), y1);
      EXPECT_EQ(0, std::memcmp(one.data(), got.data() + i * c.rows, one.size() * 4)) << "row " << i;
    }
    // A row slice (scales addressed from the slice's first row).
    if (c.rows > 20) {
      QMatrix s = hm.q.slice_rows(5, 15);
      Matrix sc = cpu().matrix(s), sg = gpu().matrix(s);
      Buffer zc(cpu(), n, 15), zg(gpu(), n, 15);
      cpu().matmul(sc, xc, zc);
      gpu().matmul(sg, xg, zg);
      EXPECT_LT(max_rel(values(gpu(), zg), values(cpu(), zc), 1e-2), 1e-4) << "slice";
    }
    // A host-only matrix (a routed expert outside the VRAM cache) is copied in for the call.
    Buffer yh(gpu(), n, c.rows);
    gpu().matmul(host_matrix(hm.q), xg, yh);
    auto hosted = values(gpu(), yh);
    EXPECT_EQ(0, std::memcmp(hosted.data(), got.data(), got.size() * 4)) << "host-only handle";
  }
}

// Large products run several weight rows per warp (cuda_matmul.cu), small ones and row slices
// one: the rows a slice shares with the whole matrix, and one activation row against many, must
// come out bit-identical, and all of them match the CPU. 20011 rows fill any GPU up to ~300
// multiprocessors at eight rows per warp; the odd count leaves a partial last warp.
TEST(CudaProducts, RowsPerWarpNeverChangeABit) {
  const FormatCase cases[] = {
      {WeightFormat::BF16, 20011, 136, 0},        {WeightFormat::F32, 20011, 68, 0},
      {WeightFormat::FP8_E4M3_BLOCK, 20011, 200, 0}, {WeightFormat::INT4_GROUP, 20011, 264, 8},
      {WeightFormat::MXFP4, 20011, 96, 0},        {WeightFormat::INT8_ROW, 20011, 203, 0},
      {WeightFormat::F16, 20011, 136, 0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(fmt::format("{} [{}, {}]", weight_format_name(c.f), c.rows, c.cols));
    HostMatrix hm = random_matrix(c.f, c.rows, c.cols, c.group);
    const int64_t n = 3;
    auto x = randn(n * c.cols);
    Matrix wc = cpu().matrix(hm.q), wg = gpu().matrix(hm.q);
    Buffer xc = on(cpu(), x, n, c.cols), xg = on(gpu(), x, n, c.cols);
    Buffer yc(cpu(), n, c.rows), yg(gpu(), n, c.rows), y1(gpu(), 1, c.rows);
    cpu().matmul(wc, xc, yc);
    gpu().matmul(wg, xg, yg);
    gpu().matmul(wg, xg.row_range(1, 1), y1);
    const auto want = values(cpu(), yc), got = values(gpu(), yg), one = values(gpu(), y1);
    EXPECT_LT(max_rel(got, want, 1e-2), 1e-4);
    EXPECT_EQ(0, std::memcmp(one.data(), got.data() + c.rows, one.size() * 4)) << "one row vs three";
    for (const int64_t r0 : {int64_t(0), int64_t(7), c.rows - 13}) {
      Matrix sg = gpu().matrix(hm.q.slice_rows(r0, 13));
      Buffer zg(gpu(), n, 13);
      gpu().matmul(sg, xg, zg);
      const auto sub = values(gpu(), zg);
      for (int64_t i = 0; i < n; ++i)
        EXPECT_EQ(0, std::memcmp(sub.data() + i * 13, got.data() + i * c.rows + r0, 13 * 4))
            << "13-row slice at row " << r0 << ", activation row " << i;
    }
  }
}

// Every f16 code (subnormals, infinities, NaNs) through the product kernels' decoding: row r
// holds code r in all 8 columns, so against 8 ones each output is 8 * value, exact in f32 (an f16
// significand has 11 bits), for one activation row and for a tile of nine.
TEST(CudaProducts, EveryF16CodeDecodesExactly) {
  const int64_t rows = 65536, cols = 8;
  HostMatrix hm;
  hm.data.resize(size_t(rows * cols * 2));
  auto* h = reinterpret_cast<uint16_t*>(hm.data.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) h[r * cols + c] = uint16_t(r);
  hm.q.fmt = WeightFormat::F16;
  hm.q.rows = rows;
  hm.q.cols = cols;
  hm.q.row_bytes = cols * 2;
  hm.q.data = hm.data.data();
  Matrix wg = gpu().matrix(hm.q);
  for (const int64_t n : {int64_t(1), int64_t(9)}) {
    SCOPED_TRACE(fmt::format("{} activation rows", n));
    Buffer xg = on(gpu(), std::vector<float>(size_t(n * cols), 1.0f), n, cols), yg(gpu(), n, rows);
    gpu().matmul(wg, xg, yg);
    const auto got = values(gpu(), yg);
    int wrong = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = 0; r < rows; ++r) {
        const float want = 8.0f * f16_to_f32(uint16_t(r)), g = got[size_t(i * rows + r)];
        if (std::isnan(want) ? !std::isnan(g) : g != want) {
          if (++wrong <= 5) ADD_FAILURE() << fmt::format("code {:#06x}: {} instead of {}", r, g, want);
        }
      }
    EXPECT_EQ(wrong, 0);
  }
}

TEST(CudaProducts, EmbeddingRowsDecodeExactly) {
  for (WeightFormat f : {WeightFormat::BF16, WeightFormat::F32, WeightFormat::INT8_ROW}) {
    HostMatrix hm = random_matrix(f, 50, 72);
    const std::vector<int32_t> ids = {3, 49, 0, 3, 17};
    Buffer oc(cpu(), 5, 72), og(gpu(), 5, 72);
    cpu().embed(cpu().matrix(hm.q), ids.data(), 5, oc);
    gpu().embed(gpu().matrix(hm.q), ids.data(), 5, og);
    EXPECT_EQ(values(gpu(), og), values(cpu(), oc)) << weight_format_name(f);
  }
}

// ---- tensor-core products (cuda_matmul_tc.cu)

// What the tensor-core products assume of mma.sync: an output element depends only on its A row,
// its B column and its C element, so where a row or token sits in a tile, and what the other rows
// and columns hold, never changes its bits. Operands spread over 2^-30 .. 2^30 (the products need
// alignment inside the MMA), rows and columns permuted, and NaN and infinities in the neighbours.
TEST(CudaTensorCores, ElementDependsOnlyOnItsRowAndColumn) {
  const int count = 512;
  std::uniform_int_distribution<int> ex(-30, 30), sign(0, 1), mant(0, 127), idx16(0, 15), idx8(0, 7), junk(0, 9);
  auto value = [&] {
    const float v = std::ldexp(1.0f + float(mant(rng())) / 128.0f, ex(rng()));
    return f32_to_bf16(sign(rng()) ? -v : v);
  };
  auto garbage = [&]() -> uint16_t {
    const int k = junk(rng());
    return k == 0 ? uint16_t(0x7FC1) : k == 1 ? uint16_t(0x7F80) : k == 2 ? uint16_t(0xFF80) : value();
  };
  std::vector<uint16_t> A(size_t(count) * 256), B(size_t(count) * 128);
  std::vector<float> C(size_t(count) * 128);
  for (auto& a : A) a = value();
  for (auto& b : B) b = value();
  for (auto& c : C) c = std::ldexp(float(randn(1)[0]), ex(rng()));
  auto run = [&](const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, const std::vector<float>& c) {
    std::vector<float> fa(a.size() / 2), fb(b.size() / 2);
    std::memcpy(fa.data(), a.data(), a.size() * 2);
    std::memcpy(fb.data(), b.data(), b.size() * 2);
    Buffer ga = on(gpu(), fa, 1, int64_t(fa.size())), gb = on(gpu(), fb, 1, int64_t(fb.size()));
    Buffer gc = on(gpu(), c, 1, int64_t(c.size())), gd(gpu(), 1, int64_t(c.size()));
    gpu().synchronize("the probe's inputs");
    EXPECT_EQ(0, cuda::mma_probe(reinterpret_cast<const uint16_t*>(Tensor(ga).data()),
                                 reinterpret_cast<const uint16_t*>(Tensor(gb).data()), Tensor(gc).data(),
                                 Tensor(gd).data(), count));
    return values(gpu(), gd);
  };
  const auto D = run(A, B, C);
  // Rows and columns permuted.
  std::vector<uint16_t> A1(A.size()), B1(B.size());
  std::vector<float> C1(C.size());
  std::vector<std::array<int, 16>> pr(static_cast<size_t>(count));
  std::vector<std::array<int, 8>> pc(static_cast<size_t>(count));
  for (int w = 0; w < count; ++w) {
    auto& r = pr[size_t(w)];
    auto& c = pc[size_t(w)];
    for (int i = 0; i < 16; ++i) r[size_t(i)] = i;
    for (int j = 0; j < 8; ++j) c[size_t(j)] = j;
    std::shuffle(r.begin(), r.end(), rng());
    std::shuffle(c.begin(), c.end(), rng());
    for (int i = 0; i < 16; ++i)
      for (int k = 0; k < 16; ++k) A1[size_t(w * 256 + r[size_t(i)] * 16 + k)] = A[size_t(w * 256 + i * 16 + k)];
    for (int j = 0; j < 8; ++j)
      for (int k = 0; k < 16; ++k) B1[size_t(w * 128 + c[size_t(j)] * 16 + k)] = B[size_t(w * 128 + j * 16 + k)];
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 8; ++j) C1[size_t(w * 128 + r[size_t(i)] * 8 + c[size_t(j)])] = C[size_t(w * 128 + i * 8 + j)];
  }
  const auto D1 = run(A1, B1, C1);
  int moved = 0;
  for (int w = 0; w < count; ++w)
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 8; ++j) {
        const float a = D[size_t(w * 128 + i * 8 + j)];
        const float b = D1[size_t(w * 128 + pr[size_t(w)][size_t(i)] * 8 + pc[size_t(w)][size_t(j)])];
        if (std::memcmp(&a, &b, 4) != 0 && ++moved <= 5)
          ADD_FAILURE() << fmt::format("problem {} ({}, {}): {} in place, {} permuted", w, i, j, a, b);
      }
  EXPECT_EQ(moved, 0) << "elements whose bits depend on their place in the tile";
  // One element kept per problem, every other row, column and C element garbage.
  std::vector<uint16_t> A2 = A, B2 = B;
  std::vector<float> C2(C.size());
  std::vector<int> keep_i(static_cast<size_t>(count)), keep_j(static_cast<size_t>(count));
  for (int w = 0; w < count; ++w) {
    const int i0 = idx16(rng()), j0 = idx8(rng());
    keep_i[size_t(w)] = i0, keep_j[size_t(w)] = j0;
    for (int i = 0; i < 16; ++i)
      if (i != i0)
        for (int k = 0; k < 16; ++k) A2[size_t(w * 256 + i * 16 + k)] = garbage();
    for (int j = 0; j < 8; ++j)
      if (j != j0)
        for (int k = 0; k < 16; ++k) B2[size_t(w * 128 + j * 16 + k)] = garbage();
    for (int e = 0; e < 128; ++e) C2[size_t(w * 128 + e)] = bf16_to_f32(garbage());
    C2[size_t(w * 128 + i0 * 8 + j0)] = C[size_t(w * 128 + i0 * 8 + j0)];
  }
  const auto D2 = run(A2, B2, C2);
  int changed = 0;
  for (int w = 0; w < count; ++w) {
    const size_t e = size_t(w * 128 + keep_i[size_t(w)] * 8 + keep_j[size_t(w)]);
    if (std::memcmp(&D[e], &D2[e], 4) != 0 && ++changed <= 5)
      ADD_FAILURE() << fmt::format("problem {}: {} alone, {} among garbage", w, D[e], D2[e]);
  }
  EXPECT_EQ(changed, 0) << "elements whose bits depend on other rows or columns";
}

// Every tensor-core format: each activation-row count (1-2, 3-5, 6-8: the small-n kernel with one
// to three n8 tiles; 9-16, 17-32, more: the large-n kernel with 16, 32 or 64 tokens per block)
// gives every row the bits it has in a batch of 77; unaligned activations (scalar loads) too.
// Partial slices (columns not a multiple of 256), a half stage (columns 32 mod 64), partial row
// and token tiles. All match the CPU.
TEST(CudaTensorCores, EveryRowCountGivesTheSameBits) {
  struct Case {
    WeightFormat f;
    int64_t rows, cols;
    int32_t group;
  };
  const Case cases[] = {
      {WeightFormat::BF16, 300, 1312, 32},          {WeightFormat::BF16, 129, 64, 32},
      {WeightFormat::FP8_E4M3_BLOCK, 300, 1344, 32}, {WeightFormat::FP8_E4M3_BLOCK, 200, 128, 32},
      {WeightFormat::INT4_GROUP, 300, 1312, 32},     {WeightFormat::INT4_GROUP, 150, 1280, 128},
      {WeightFormat::MXFP4, 300, 1312, 32},          {WeightFormat::INT8_ROW, 300, 1344, 32},
  };
  const int64_t N = 77;
  const int64_t pieces[] = {1, 2, 4, 5, 7, 8, 11, 16, 20, 3};  // 77 rows in all
  for (const auto& c : cases) {
    SCOPED_TRACE(fmt::format("{} [{}, {}]", weight_format_name(c.f), c.rows, c.cols));
    HostMatrix hm = random_matrix(c.f, c.rows, c.cols, c.group);
    ASSERT_TRUE(cuda::tc_eligible(hm.q));
    auto x = randn(N * c.cols);
    Matrix wc = cpu().matrix(hm.q), wg = gpu().matrix(hm.q);
    Buffer xc = on(cpu(), x, N, c.cols), xg = on(gpu(), x, N, c.cols);
    Buffer yc(cpu(), N, c.rows), yg(gpu(), N, c.rows);
    cpu().matmul(wc, xc, yc);
    gpu().matmul(wg, xg, yg);
    const auto want = values(cpu(), yc), all = values(gpu(), yg);
    EXPECT_LT(max_rel(all, want, 1e-2), 1e-4) << "vs the CPU";
    int64_t i0 = 0;
    for (const int64_t len : pieces) {
      Buffer yp(gpu(), len, c.rows);
      gpu().matmul(wg, xg.row_range(i0, len), yp);
      const auto got = values(gpu(), yp);
      EXPECT_EQ(0, std::memcmp(got.data(), all.data() + i0 * c.rows, got.size() * 4))
          << len << " rows from row " << i0;
      i0 += len;
    }
    // Activations at an odd float offset with an odd row stride: the scalar loads.
    Buffer xu_buf(gpu(), N, c.cols + 1);
    const Tensor xu = Tensor(xu_buf).col_range(1, c.cols);
    gpu().upload(x.data(), xu);
    for (const int64_t n : {int64_t(1), int64_t(6), N}) {
      Buffer yu(gpu(), n, c.rows);
      gpu().matmul(wg, xu.row_range(0, n), yu);
      const auto got = values(gpu(), yu);
      EXPECT_EQ(0, std::memcmp(got.data(), all.data(), got.size() * 4)) << n << " unaligned rows";
    }
  }
}

// The two small-n kernels (weights streamed through shared memory, or round by round) give the
// same bits for 1-8 activation rows, on matrices with many slices per warp (a partial last slice,
// a row count that is not a multiple of 16), single and grouped, and both match the batch.
TEST(CudaTensorCores, StreamingSmallKernelGivesTheRoundKernelsBits) {
  struct Case {
    WeightFormat f;
    int64_t rows, cols;
    int32_t group;
  };
  const Case cases[] = {
      {WeightFormat::BF16, 203, 16384 + 96, 32},   {WeightFormat::FP8_E4M3_BLOCK, 203, 7168, 128},
      {WeightFormat::INT4_GROUP, 203, 7168 + 32, 32}, {WeightFormat::INT4_GROUP, 130, 2048, 128},
      {WeightFormat::MXFP4, 203, 7168 + 160, 32},  {WeightFormat::INT8_ROW, 203, 4096 + 64, 32},
  };
  const int64_t N = 24;
  for (const auto& c : cases) {
    SCOPED_TRACE(fmt::format("{} [{}, {}]", weight_format_name(c.f), c.rows, c.cols));
    HostMatrix hm = random_matrix(c.f, c.rows, c.cols, c.group);
    ASSERT_TRUE(cuda::tc_eligible(hm.q));
    auto x = randn(N * c.cols);
    Matrix wc = cpu().matrix(hm.q), wg = gpu().matrix(hm.q);
    Buffer xc = on(cpu(), x, N, c.cols), xg = on(gpu(), x, N, c.cols);
    Buffer yc(cpu(), N, c.rows), yg(gpu(), N, c.rows);
    cpu().matmul(wc, xc, yc);
    gpu().matmul(wg, xg, yg);
    const auto want = values(cpu(), yc), all = values(gpu(), yg);
    EXPECT_LT(max_rel(all, want, 1e-2), 1e-4) << "vs the CPU";
    for (const int64_t n : {1, 2, 3, 5, 6, 8}) {
      // rounds, then streamed with the format's tiles per block, one and two
      std::vector<float> got[4];
      for (int k = 0; k < 4; ++k) {
        cuda::set_streaming_small_products(k > 0);
        cuda::set_streaming_small_tiles(k > 1 ? k - 1 : 0);
        Buffer y(gpu(), n, c.rows);
        gpu().matmul(wg, xg.row_range(8, n), y);
        got[k] = values(gpu(), y);
      }
      cuda::set_streaming_small_products(2);  // the default (later tests run with it)
      cuda::set_streaming_small_tiles(0);
      for (int k = 0; k < 4; ++k)
        EXPECT_EQ(0, std::memcmp(got[k].data(), all.data() + 8 * c.rows, got[k].size() * 4))
            << n << " rows vs the batch: " << (k == 0 ? "rounds" : "streamed, tiles " + std::to_string(k - 1));
    }
  }
}

// The large-n kernels (the first, two barriers a stage; the pipelined one; the warpgroup-MMA one,
// splitting the activations in each block or once per product) give the same bits for 9-100
// activation rows (one, two and four token tiles per block, a partial last block of rows and of
// tokens, a partial last slice), and each row equals the same token alone. On a Hopper GPU with a
// build for sm_90a the warpgroup kernels can run, the one splitting in each block by default.
TEST(CudaTensorCores, LargeKernelVariantsGiveTheSameBits) {
  const int by_default = cuda::large_products_variant();
  cuda::set_large_products_variant(3);
  const int wg = cuda::large_products_variant();
  cuda::set_large_products_variant(by_default);
#if defined(SLUICE_CUDA_SM90A)
  if (cuda::compute_capability() == 90) {
    ASSERT_EQ(3, wg) << "the warpgroup-MMA kernel does not run on this Hopper GPU";
    EXPECT_EQ(2, by_default) << "the warpgroup-MMA kernel is the default on a Hopper GPU";
  }
#endif
  std::printf("large-n variants compared: 0, 1%s\n", wg == 3 ? ", 2 and 3 (wgmma)" : " (no wgmma kernel here)");
  struct Case {
    WeightFormat f;
    int64_t rows, cols;
    int32_t group;
  };
  const Case cases[] = {
      {WeightFormat::BF16, 203, 4096 + 96, 32},   {WeightFormat::FP8_E4M3_BLOCK, 203, 4096, 128},
      {WeightFormat::INT4_GROUP, 203, 4096 + 32, 32}, {WeightFormat::INT4_GROUP, 130, 2048, 128},
      {WeightFormat::MXFP4, 203, 4096 + 160, 32},  {WeightFormat::INT8_ROW, 203, 4096 + 64, 32},
  };
  const int64_t N = 100;
  for (const auto& c : cases) {
    SCOPED_TRACE(fmt::format("{} [{}, {}]", weight_format_name(c.f), c.rows, c.cols));
    HostMatrix hm = random_matrix(c.f, c.rows, c.cols, c.group);
    ASSERT_TRUE(cuda::tc_eligible(hm.q));
    auto x = randn(N * c.cols);
    Matrix wm = gpu().matrix(hm.q);
    Buffer xg = on(gpu(), x, N, c.cols);
    for (const int64_t n : {9, 20, 37, 64, 100}) {
      std::vector<float> got[4];
      for (int v = 0; v < 4; ++v) {
        cuda::set_large_products_variant(v);
        Buffer y(gpu(), n, c.rows);
        gpu().matmul(wm, xg.row_range(0, n), y);
        got[v] = values(gpu(), y);
      }
      cuda::set_large_products_variant(by_default);
      Buffer y1(gpu(), 1, c.rows);
      gpu().matmul(wm, xg.row_range(n - 1, 1), y1);
      const auto one = values(gpu(), y1);
      EXPECT_EQ(0, std::memcmp(got[1].data(), got[0].data(), got[0].size() * 4)) << n << " rows: pipelined vs first";
      EXPECT_EQ(0, std::memcmp(got[2].data(), got[0].data(), got[0].size() * 4)) << n << " rows: wgmma vs first";
      EXPECT_EQ(0, std::memcmp(got[3].data(), got[0].data(), got[0].size() * 4))
          << n << " rows: wgmma on pre-split parts vs first";
      EXPECT_EQ(0, std::memcmp(one.data(), got[3].data() + (n - 1) * c.rows, one.size() * 4))
          << n << " rows: last alone";
    }
  }
}

// The three-part activations keep f32 accuracy: over 16384 columns, against a float64 reference,
// the tensor-core error stays within 5x the CPU's (the golden gate), also for rows scaled by
// 2^60 and 2^-60 and for a row whose values span 2^-20 .. 2^20; a NaN reaches every output of
// its row, as on the CPU.
TEST(CudaTensorCores, ProductsKeepF32Accuracy) {
  const int64_t rows = 64, cols = 16384, n = 5;
  for (const WeightFormat f : {WeightFormat::BF16, WeightFormat::FP8_E4M3_BLOCK, WeightFormat::INT4_GROUP,
                               WeightFormat::MXFP4, WeightFormat::INT8_ROW}) {
    SCOPED_TRACE(weight_format_name(f));
    HostMatrix hm = random_matrix(f, rows, cols);
    ASSERT_TRUE(cuda::tc_eligible(hm.q));
    std::vector<float> x = randn(n * cols);
    std::uniform_int_distribution<int> spread(-20, 20);
    for (int64_t c = 0; c < cols; ++c) {
      x[size_t(1 * cols + c)] = std::ldexp(x[size_t(1 * cols + c)], 60);
      x[size_t(2 * cols + c)] = std::ldexp(x[size_t(2 * cols + c)], -60);
      x[size_t(3 * cols + c)] = std::ldexp(x[size_t(3 * cols + c)], spread(rng()));
    }
    x[size_t(4 * cols + 777)] = std::nanf("");
    Matrix wc = cpu().matrix(hm.q), wg = gpu().matrix(hm.q);
    Buffer xc = on(cpu(), x, n, cols), xg = on(gpu(), x, n, cols);
    Buffer yc(cpu(), n, rows), yg(gpu(), n, rows);
    cpu().matmul(wc, xc, yc);
    gpu().matmul(wg, xg, yg);
    const auto yc_v = values(cpu(), yc), yg_v = values(gpu(), yg);
    std::vector<float> wrow(static_cast<size_t>(cols));
    for (int64_t i = 0; i < 4; ++i) {
      double ec = 0, eg = 0, ss = 0;
      std::vector<double> ref(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        decode_row_ref(hm.q, r, wrow.data());
        double s = 0;
        for (int64_t c = 0; c < cols; ++c) s += double(wrow[size_t(c)]) * double(x[size_t(i * cols + c)]);
        ref[size_t(r)] = s;
        ss += s * s;
      }
      const double rms = std::sqrt(ss / double(rows));
      for (int64_t r = 0; r < rows; ++r) {
        ec = std::max(ec, std::abs(double(yc_v[size_t(i * rows + r)]) - ref[size_t(r)]) / rms);
        eg = std::max(eg, std::abs(double(yg_v[size_t(i * rows + r)]) - ref[size_t(r)]) / rms);
      }
      std::printf("%-6s row %lld: cpu error %.3g, tensor cores %.3g\n", std::string(weight_format_name(f)).c_str(),
                  static_cast<long long>(i), ec, eg);
      EXPECT_LE(eg, 5 * ec) << "activation row " << i;
    }
    int nan_rows = 0;
    for (int64_t r = 0; r < rows; ++r) nan_rows += std::isnan(yg_v[size_t(4 * rows + r)]) && std::isnan(yc_v[size_t(4 * rows + r)]);
    EXPECT_EQ(nan_rows, rows) << "a NaN activation reaches every output";
  }
}

// Runs the same op on both backends over copies of the same inputs.
struct Twin {
  Buffer c, g;
  Twin(const std::vector<float>& v, int64_t rows, int64_t cols) : c(on(cpu(), v, rows, cols)), g(on(gpu(), v, rows, cols)) {}
  Twin(int64_t rows, int64_t cols) : c(cpu(), rows, cols), g(gpu(), rows, cols) {}
  double error(double floor = 1e-3) const { return max_rel(values(gpu(), g), values(cpu(), c), floor); }
};
struct TwinVec {
  std::vector<float> host;
  Vector c, g;
  explicit TwinVec(std::vector<float> v) : host(std::move(v)) {
    c = cpu().vector(host.data(), int64_t(host.size()));
    g = gpu().vector(host.data(), int64_t(host.size()));
  }
};

// The per-layer finite check on the GPU gives the CPU's index: the first non-finite value in
// packed order, whatever comes after it, in a view narrower than its rows (ld > cols).
TEST(CudaOps, FirstNonFiniteIsTheCpus) {
  const int64_t T = 7, D = 300, LD = 320;
  auto v = randn(T * LD);
  v[5 * LD + 310] = NAN;  // outside the view: not seen
  Twin x(v, T, LD);
  const Tensor cv = x.c.view().col_range(0, D), gv = x.g.view().col_range(0, D);
  EXPECT_EQ(gpu().first_nonfinite(gv), -1);
  EXPECT_EQ(cpu().first_nonfinite(cv), -1);
  v[6 * LD + 2] = -INFINITY;
  v[3 * LD + 299] = NAN;
  v[4 * LD + 0] = INFINITY;
  Twin y(v, T, LD);
  const Tensor cy = y.c.view().col_range(0, D), gy = y.g.view().col_range(0, D);
  EXPECT_EQ(cpu().first_nonfinite(cy), 3 * D + 299);
  EXPECT_EQ(gpu().first_nonfinite(gy), 3 * D + 299);
  EXPECT_EQ(gpu().first_nonfinite(gy.row_range(4, 3)), 0);
}

// The deferred check (decoder: one read per pass) records what the base class's immediate one
// does: the first tag that had a non-finite value wins whatever the order of the watches, with
// its index and value; take clears it, and so does clear.
TEST(CudaOps, WatchedNonFiniteIsTheBaseClasss) {
  const int64_t T = 4, D = 300, LD = 320;
  auto a = randn(T * LD), b = randn(T * LD);
  a[2 * LD + 7] = -INFINITY;
  b[1 * LD + 299] = NAN;
  b[3 * LD + 0] = INFINITY;
  Twin x(a, T, LD), y(b, T, LD), z(randn(T * LD), T, LD);
  const auto view = [&](Twin& t, bool on_gpu) { return (on_gpu ? t.g.view() : t.c.view()).col_range(0, D); };
  for (const bool on_gpu : {false, true}) {
    Backend& be = on_gpu ? gpu() : cpu();
    be.clear_nonfinite();
    be.watch_nonfinite(view(z, on_gpu), 0);
    be.watch_nonfinite(view(y, on_gpu), 7);
    be.watch_nonfinite(view(x, on_gpu), 5);  // smaller tag, watched later: it wins
    be.watch_nonfinite(view(y, on_gpu), 9);
    const Backend::NonFinite r = be.take_nonfinite();
    EXPECT_EQ(r.tag, 5) << be.name();
    EXPECT_EQ(r.index, 2 * D + 7) << be.name();
    EXPECT_EQ(r.value, -INFINITY) << be.name();
    EXPECT_EQ(be.take_nonfinite().tag, -1) << be.name() << ": take clears";
    be.watch_nonfinite(view(y, on_gpu), 3);
    be.watch_nonfinite(view(x, on_gpu), 4);
    const Backend::NonFinite s = be.take_nonfinite();
    EXPECT_EQ(s.tag, 3) << be.name();
    EXPECT_EQ(s.index, 1 * D + 299) << be.name();
    EXPECT_TRUE(std::isnan(s.value)) << be.name();
    be.watch_nonfinite(view(x, on_gpu), 1);
    be.clear_nonfinite();
    be.watch_nonfinite(view(z, on_gpu), 2);
    EXPECT_EQ(be.take_nonfinite().tag, -1) << be.name() << ": clear forgets";
  }
  EXPECT_TRUE(gpu().defers_finite_checks());
}

TEST(CudaOps, ElementwiseMatchTheCpu) {
  const int64_t T = 5, D = 96;
  TwinVec w(randn(D));
  {
    Twin x(randn(T * D), T, D), o(T, D);
    cpu().rmsnorm(x.c, w.c, 1e-6f, o.c, 0);
    gpu().rmsnorm(x.g, w.g, 1e-6f, o.g, 0);
    EXPECT_LT(o.error(), 1e-5) << "rmsnorm";
    TwinVec w32(randn(32));
    Twin y(randn(T * D), T, D), oy(T, D);
    cpu().rmsnorm(y.c, w32.c, 1e-6f, oy.c, 32);
    gpu().rmsnorm(y.g, w32.g, 1e-6f, oy.g, 32);
    EXPECT_LT(oy.error(), 1e-5) << "grouped rmsnorm (one weight per group position)";
    cpu().rmsnorm(x.c, Vector{}, 1e-6f, x.c, 32);
    gpu().rmsnorm(x.g, Vector{}, 1e-6f, x.g, 32);
    EXPECT_LT(x.error(), 1e-5) << "grouped rmsnorm in place";
  }
  {
    Twin x(randn(T * D), T, D);
    cpu().l2norm(x.c, 32, 1e-6f, 0.5f);
    gpu().l2norm(x.g, 32, 1e-6f, 0.5f);
    EXPECT_LT(x.error(), 1e-5) << "l2norm";
  }
  {
    auto a = randn(T * D), b = randn(T * D);
    Twin x(a, T, D), y(b, T, D);
    cpu().add(x.c, y.c), gpu().add(x.g, y.g);
    cpu().add_row(w.c, y.c), gpu().add_row(w.g, y.g);
    cpu().mul_sigmoid(x.c, y.c), gpu().mul_sigmoid(x.g, y.g);
    cpu().sigmoid(x.c), gpu().sigmoid(x.g);
    EXPECT_LT(y.error(), 1e-5) << "add, add_row, mul_sigmoid";
    EXPECT_LT(x.error(), 1e-5) << "sigmoid";
  }
  GatedActivation acts[3];
  acts[1].kind = GatedActivation::SiTU;
  acts[2].kind = GatedActivation::ClampedSwiGLU;
  for (const auto& act : acts) {
    Twin g(randn(T * D, 3.0f), T, D), u(randn(T * D, 3.0f), T, D), o(T, D), oi(T, D / 2);
    cpu().gated(act, g.c, u.c, o.c), gpu().gated(act, g.g, u.g, o.g);
    EXPECT_LT(o.error(), 1e-5) << "gated " << int(act.kind);
    cpu().gated_interleaved(act, g.c, oi.c), gpu().gated_interleaved(act, g.g, oi.g);
    EXPECT_LT(oi.error(), 1e-5) << "gated interleaved " << int(act.kind);
  }
  for (bool interleaved : {false, true}) {
    Rope r;
    r.dim = 16;
    r.interleaved = interleaved;
    for (int i = 0; i < 8; ++i) r.inv_freq.push_back(std::pow(10000.0, -2.0 * i / 16.0));
    r.attention_factor = 1.1;
    Twin x(randn(T * D), T, D);
    cpu().rope(r, x.c, 4, 24, 8, 1000);
    gpu().rope(r, x.g, 4, 24, 8, 1000);
    EXPECT_LT(x.error(), 1e-5) << "rope interleaved=" << interleaved;
  }
  {
    const std::vector<int64_t> rows = {4, 0, 2};
    const std::vector<float> wt = {0.5f, -1.25f, 2.0f};
    Twin src(randn(T * D), T, D), dst(3, D), acc(randn(T * D), T, D);
    cpu().gather_rows(src.c, rows, dst.c), gpu().gather_rows(src.g, rows, dst.g);
    EXPECT_EQ(dst.error(), 0.0) << "gather";
    cpu().scatter_add(dst.c, rows, wt, acc.c), gpu().scatter_add(dst.g, rows, wt, acc.g);
    EXPECT_LT(acc.error(), 1e-6) << "scatter_add";
  }
}

// A MoE layer's routed experts in one grouped call (the decode path) give the
// bits of expert_ffn on each expert's rows, for both gate/up layouts, device
// resident or copied in for the call; and the CPU's values. A long scatter list
// (grouped by target row on the GPU) gives the bits of the same list fed in
// short pieces (the one-thread-per-column walk).
TEST(CudaMoe, GroupedExpertsEqualOneAtATime) {
  struct Case {
    bool interleaved;
    WeightFormat f;
    int64_t D, I;
    std::vector<int64_t> offsets = {0, 1, 4, 4, 13, 15};  // an expert with no rows too
  };
  std::vector<Case> cases;
  for (const bool interleaved : {false, true})
    for (const WeightFormat f : {WeightFormat::FP8_E4M3_BLOCK, WeightFormat::BF16, WeightFormat::MXFP4})
      cases.push_back({interleaved, f, 136, 64});
  // Experts wide enough that the grouped launch runs more weight rows per warp than one expert's
  // product alone (cuda_matmul.cu): the bits must not move.
  // (2112 rows: four per warp grouped, two alone, on a 132-multiprocessor H200.)
  cases.push_back({false, WeightFormat::MXFP4, 136, 2112});
  cases.push_back({false, WeightFormat::INT4_GROUP, 136, 2112});
  // Every matrix on the tensor cores (cuda_matmul_tc.cu), up to 40 rows per expert: the grouped
  // small-n and large-n launches against each expert alone.
  const std::vector<int64_t> wide = {0, 40, 43, 43, 60, 61};
  cases.push_back({false, WeightFormat::BF16, 256, 192, wide});
  cases.push_back({true, WeightFormat::FP8_E4M3_BLOCK, 256, 128, wide});
  cases.push_back({false, WeightFormat::INT4_GROUP, 256, 128, wide});
  cases.push_back({true, WeightFormat::MXFP4, 256, 64, wide});
  cases.push_back({false, WeightFormat::INT8_ROW, 256, 128, wide});
  for (const Case& c : cases) {
    const bool interleaved = c.interleaved;
    const WeightFormat f = c.f;
    const int64_t D = c.D, I = c.I;
    SCOPED_TRACE(fmt::format("{} interleaved={} I={} rows={}", weight_format_name(f), interleaved, I, c.offsets.back()));
    // whole 32-value blocks
    const int64_t cols = (f == WeightFormat::MXFP4 || f == WeightFormat::INT4_GROUP) && D % 32 != 0 ? 128 : D;
    std::vector<HostMatrix> mats;
    std::vector<ExpertWeights> gw, hw;
    const int n_experts = 5;
    for (int e = 0; e < n_experts; ++e) {
      mats.push_back(random_matrix(f, interleaved ? 2 * I : I, cols));
      if (!interleaved) mats.push_back(random_matrix(f, I, cols));
      mats.push_back(random_matrix(f, cols, I));
    }
    for (int e = 0, m = 0; e < n_experts; ++e) {
      ExpertWeights g, h;
      g.gate_up_interleaved = h.gate_up_interleaved = interleaved;
      g.gate = gpu().matrix(mats[size_t(m)].q);
      h.gate = host_matrix(mats[size_t(m++)].q);
      if (!interleaved) {
        g.up = gpu().matrix(mats[size_t(m)].q);
        h.up = host_matrix(mats[size_t(m++)].q);
      }
      g.down = gpu().matrix(mats[size_t(m)].q);
      h.down = host_matrix(mats[size_t(m++)].q);
      gw.push_back(g);
      hw.push_back(h);
    }
    const std::vector<int64_t>& offsets = c.offsets;
    const int64_t N = offsets.back();
    GatedActivation act;
    act.kind = interleaved ? GatedActivation::ClampedSwiGLU : GatedActivation::SwiGLU;
    Twin x(randn(N * cols), N, cols), y(N, cols);
    Buffer yh(gpu(), N, cols), y1(gpu(), N, cols);
    std::vector<const ExpertWeights*> pg, ph, pc;
    for (int e = 0; e < n_experts; ++e) pg.push_back(&gw[size_t(e)]), ph.push_back(&hw[size_t(e)]);
    gpu().expert_ffns(pg, offsets, act, x.g, y.g);
    gpu().expert_ffns(ph, offsets, act, x.g, yh);  // every matrix copied in for the call
    for (int e = 0; e < n_experts; ++e) {
      const int64_t r0 = offsets[size_t(e)], n = offsets[size_t(e) + 1] - r0;
      if (n > 0) gpu().expert_ffn(gw[size_t(e)], act, x.g.row_range(r0, n), Tensor(y1).row_range(r0, n));
    }
    cpu().expert_ffns(ph, offsets, act, x.c, y.c);
    const auto grouped = values(gpu(), y.g), hosted = values(gpu(), yh), one = values(gpu(), y1);
    EXPECT_EQ(0, std::memcmp(grouped.data(), one.data(), one.size() * 4)) << "grouped vs one at a time";
    EXPECT_EQ(0, std::memcmp(hosted.data(), one.data(), one.size() * 4)) << "copied in vs resident";
    EXPECT_LT(y.error(1e-2), 1e-4) << "vs the CPU";
  }
  {
    const int64_t T = 7, D = 300, n = 75;
    std::vector<int64_t> rows;
    std::vector<float> wt = randn(n);
    for (int64_t i = 0; i < n; ++i) rows.push_back((i * 5 + i / 7) % T);
    Twin src(randn(n * D), n, D);
    const auto start = randn(T * D);
    Twin acc(start, T, D);
    Buffer pieces = on(gpu(), start, T, D);
    cpu().scatter_add(src.c, rows, wt, acc.c), gpu().scatter_add(src.g, rows, wt, acc.g);
    for (int64_t i0 = 0; i0 < n; i0 += 20) {
      const int64_t k = std::min<int64_t>(20, n - i0);
      const std::vector<int64_t> r(rows.begin() + i0, rows.begin() + i0 + k);
      const std::vector<float> w(wt.begin() + i0, wt.begin() + i0 + k);
      gpu().scatter_add(src.g.row_range(i0, k), r, w, pieces);
    }
    EXPECT_EQ(values(gpu(), acc.g), values(gpu(), pieces)) << "long scatter list vs short pieces";
    EXPECT_LT(acc.error(), 1e-6) << "long scatter list vs the CPU";
  }
}

TEST(CudaOps, AttentionCoresMatchTheCpu) {
  // Absorbed MLA over a latent cache, bf16 and FP8 up-projections.
  for (WeightFormat f : {WeightFormat::BF16, WeightFormat::FP8_E4M3_BLOCK}) {
    MlaShape s{4, 64, 16, 32, 24, 0.1f};
    const int64_t pos = 9, T = 3;
    HostMatrix kvb = random_matrix(f, s.n_heads * (s.nope + s.v_dim), s.kv_lora);
    Twin q(randn(T * s.n_heads * (s.nope + s.rope_dim)), T, s.n_heads * (s.nope + s.rope_dim));
    Twin cache(randn((pos + T) * (s.kv_lora + s.rope_dim)), pos + T, s.kv_lora + s.rope_dim);
    Twin o(T, s.n_heads * s.v_dim);
    cpu().mla_attend(s, cpu().matrix(kvb.q), q.c, cache.c, pos, o.c);
    gpu().mla_attend(s, gpu().matrix(kvb.q), q.g, cache.g, pos, o.g);
    EXPECT_LT(o.error(), 1e-4) << "MLA " << weight_format_name(f);
  }
  {
    // Widths that are not multiples of 4 (no 16-byte staging: element by element) over two key
    // tiles, against the CPU.
    MlaShape s{3, 30, 6, 10, 8, 0.1f};
    const int64_t pos = 70, T = 5;
    HostMatrix kvb = random_matrix(WeightFormat::BF16, s.n_heads * (s.nope + s.v_dim), s.kv_lora);
    Twin q(randn(T * s.n_heads * (s.nope + s.rope_dim)), T, s.n_heads * (s.nope + s.rope_dim));
    Twin cache(randn((pos + T) * (s.kv_lora + s.rope_dim)), pos + T, s.kv_lora + s.rope_dim);
    Twin o(T, s.n_heads * s.v_dim);
    cpu().mla_attend(s, cpu().matrix(kvb.q), q.c, cache.c, pos, o.c);
    gpu().mla_attend(s, gpu().matrix(kvb.q), q.g, cache.g, pos, o.g);
    EXPECT_LT(o.error(), 1e-4) << "MLA, unaligned widths";
  }
  // MLA at K2's head dimensions (kv_lora 512, rope 64, nope 128, v 128): T rows from position pos
  // against the CPU, then rows alone at their own positions give the bits they had inside the batch;
  // `more` checks other ways of computing the same rows against those bits.
  using MoreMla = std::function<void(const MlaShape&, const Matrix&, Twin&, Twin&, const std::vector<float>&)>;
  const auto mla_at_k2_dims = [](int64_t pos, int64_t T, std::vector<int64_t> alone, const char* what,
                                 const MoreMla& more) {
    MlaShape s{6, 512, 64, 128, 128, 0.07f};
    const int64_t qw = s.n_heads * (s.nope + s.rope_dim), width = s.n_heads * s.v_dim;
    HostMatrix kvb = random_matrix(WeightFormat::BF16, s.n_heads * (s.nope + s.v_dim), s.kv_lora);
    Twin q(randn(T * qw, 0.3f), T, qw);
    Twin cache(randn((pos + T) * (s.kv_lora + s.rope_dim)), pos + T, s.kv_lora + s.rope_dim);
    Twin o(T, width);
    Matrix wg = gpu().matrix(kvb.q);
    cpu().mla_attend(s, cpu().matrix(kvb.q), q.c, cache.c, pos, o.c);
    gpu().mla_attend(s, wg, q.g, cache.g, pos, o.g);
    EXPECT_LT(o.error(), 1e-4) << what;
    const auto batched = values(gpu(), o.g);
    for (const int64_t t : alone) {
      Buffer o1(gpu(), 1, width);
      gpu().mla_attend(s, wg, q.g.row_range(t, 1), cache.g.row_range(0, pos + t + 1), pos + t, o1);
      const auto one = values(gpu(), o1);
      EXPECT_EQ(0, std::memcmp(one.data(), batched.data() + t * width, size_t(width) * 4)) << what << ", row " << t << " alone";
    }
    if (more) more(s, wg, q, cache, batched);
  };
  // Past a few hundred positions: more than one tile of positions and columns, partial last tiles.
  mla_at_k2_dims(333, 5, {0, 1, 2, 3, 4}, "MLA at K2 dimensions", nullptr);
  // Across the attention's key splits (128 positions) and tiles (64): 70 rows from position 1,000
  // (blocks of 32 (row, head) pairs mix tokens whose causal limits fall in different splits), then
  // the same rows in two calls (13 + 57), and with the splits folded in each block.
  mla_at_k2_dims(1000, 70, {0, 23, 24, 25, 69}, "MLA across key splits",
                 [](const MlaShape& s, const Matrix& wg, Twin& q, Twin& cache, const std::vector<float>& batched) {
                   const int64_t pos = 1000, T = 70, width = s.n_heads * s.v_dim;
                   Buffer pieces(gpu(), T, width);
                   gpu().mla_attend(s, wg, q.g.row_range(0, 13), cache.g.row_range(0, pos + 13), pos,
                                    Tensor(pieces).row_range(0, 13));
                   gpu().mla_attend(s, wg, q.g.row_range(13, T - 13), cache.g.row_range(0, pos + T), pos + 13,
                                    Tensor(pieces).row_range(13, T - 13));
                   const auto two = values(gpu(), pieces);
                   EXPECT_EQ(0, std::memcmp(two.data(), batched.data(), batched.size() * 4)) << "MLA in two calls";
                   // Without room for the splits' partials (a long prefill), each block folds its rows' splits.
                   gpu().set_attention_partials_limit(0);
                   Buffer folded(gpu(), T, width);
                   gpu().mla_attend(s, wg, q.g, cache.g, pos, folded);
                   gpu().set_attention_partials_limit(512ull << 20);
                   const auto fold = values(gpu(), folded);
                   EXPECT_EQ(0, std::memcmp(fold.data(), batched.data(), batched.size() * 4))
                       << "MLA splits folded in each block";
                 });
  // GQA: full causal, sliding window, sinks.
  for (int64_t window : {0, 4})
    for (bool sinks : {false, true}) {
      GqaShape s{8, 2, 32, 0.2f, window};
      const int64_t pos = 7, T = 4;
      TwinVec sk(randn(8));
      Twin q(randn(T * 8 * 32), T, 8 * 32), k(randn((pos + T) * 64), pos + T, 64), v(randn((pos + T) * 64), pos + T, 64);
      Twin o(T, 8 * 32);
      cpu().gqa_attend(s, sinks ? sk.c : Vector{}, q.c, k.c, v.c, pos, o.c);
      gpu().gqa_attend(s, sinks ? sk.g : Vector{}, q.g, k.g, v.g, pos, o.g);
      EXPECT_LT(o.error(), 1e-4) << "GQA window " << window << " sinks " << sinks;
    }
  // KDA: short convolution (state carried across calls), decay gates, the delta rule.
  {
    const int64_t C = 40, K = 4, T = 6;
    TwinVec w(randn(C * K));
    Twin hist(randn((K - 1) * C), K - 1, C), x(randn(T * C), T, C), x2(randn(2 * C), 2, C);
    cpu().short_conv(w.c, K, hist.c, x.c), gpu().short_conv(w.g, K, hist.g, x.g);
    cpu().short_conv(w.c, K, hist.c, x2.c), gpu().short_conv(w.g, K, hist.g, x2.g);
    EXPECT_LT(x.error(), 1e-5) << "short conv";
    EXPECT_LT(x2.error(), 1e-5) << "short conv, second call";
    EXPECT_LT(hist.error(), 1e-6) << "short conv history";
  }
  for (auto kind : {KdaGate::Softplus, KdaGate::LowerBound}) {
    KdaGate g{kind, -5.0f, 3, 16};
    TwinVec a(randn(3, 0.5f)), dt(randn(48));
    Twin z(randn(4 * 48), 4, 48);
    cpu().kda_gate(g, a.c, dt.c, z.c), gpu().kda_gate(g, a.g, dt.g, z.g);
    EXPECT_LT(z.error(), 1e-5) << "kda gate " << int(kind);
  }
  {
    const int64_t H = 3, Dh = 32, T = 5;
    auto unit = [&](std::vector<float> v) {  // l2-normalised keys keep the recurrence tame
      for (int64_t r = 0; r < T * H; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < Dh; ++i) ss += double(v[size_t(r * Dh + i)]) * v[size_t(r * Dh + i)];
        for (int64_t i = 0; i < Dh; ++i) v[size_t(r * Dh + i)] = float(v[size_t(r * Dh + i)] / std::sqrt(ss));
      }
      return v;
    };
    Twin q(randn(T * H * Dh), T, H * Dh), k(unit(randn(T * H * Dh)), T, H * Dh), v(randn(T * H * Dh), T, H * Dh);
    std::vector<float> gv = randn(T * H * Dh, 0.1f);
    for (auto& x : gv) x = -std::abs(x);
    Twin g(gv, T, H * Dh), beta(std::vector<float>(size_t(T * H), 0.7f), T, H);
    Twin S(randn(H * Dh * Dh, 0.1f), H * Dh, Dh), o(T, H * Dh);
    cpu().delta_rule(q.c, k.c, v.c, g.c, beta.c, S.c, H, Dh, o.c);
    gpu().delta_rule(q.g, k.g, v.g, g.g, beta.g, S.g, H, Dh, o.g);
    EXPECT_LT(o.error(), 1e-4) << "delta rule output";
    EXPECT_LT(S.error(), 1e-4) << "delta rule state";
    cpu().delta_rule(Tensor{}, k.c, v.c, g.c, beta.c, S.c, H, Dh, Tensor{});
    gpu().delta_rule(Tensor{}, k.g, v.g, g.g, beta.g, S.g, H, Dh, Tensor{});
    EXPECT_LT(S.error(), 1e-4) << "delta rule replay without outputs";
  }
  {
    const int64_t T = 3, D = 64;
    TwinVec norm(randn(D)), proj(randn(D));
    std::vector<Twin> src;
    for (int i = 0; i < 4; ++i) src.emplace_back(randn(T * D), T, D);
    std::vector<Tensor> sc, sg;
    for (auto& s : src) sc.push_back(s.c), sg.push_back(s.g);
    Twin o(T, D);
    cpu().attn_res_mix(sc, norm.c, proj.c, 1e-5f, o.c);
    gpu().attn_res_mix(sg, norm.g, proj.g, 1e-5f, o.g);
    EXPECT_LT(o.error(), 1e-5) << "attn res mix";
  }
}

TEST(CudaErrors, OutOfMemoryNamesWhatWasAllocated) {
  try {
    gpu().allocate_bytes(uint64_t(1) << 50, "a test tensor");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of device memory while allocating"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("a test tensor"), std::string::npos) << e.what();
  }
  // The device still works afterwards.
  Twin x(randn(8), 2, 4);
  gpu().sigmoid(x.g);
  cpu().sigmoid(x.c);
  EXPECT_LT(x.error(), 1e-6);
}

// ---- whole models

const std::string kModels[] = {"deepseek_v3_tiny", "deepseek_v3_tiny_fp8", "deepseek_v3_tiny_int4", "qwen3_moe_tiny",
                         "gpt_oss_tiny",     "kimi_linear_tiny",     "kimi_k3_tiny",          "sluice_k3_mini"};
std::string model_dir(const std::string& name) {
  return name == "sluice_k3_mini" ? test::fixture("../../models/sluice-k3-mini") : test::fixture("golden/" + name);
}
std::string ref_file(const std::string& name) {
  return name == "sluice_k3_mini" ? test::fixture("golden/sluice_k3_mini_reference.safetensors")
                                  : model_dir(name) + "/reference.safetensors";
}
LoadOptions on_gpu() {
  LoadOptions o;
  o.device = Device{DeviceKind::Cuda, 0};
  return o;
}
std::vector<int32_t> golden_ids(const std::string& name) {
  auto v = test::read_i64(ref_file(name), "input_ids");
  return std::vector<int32_t>(v.begin(), v.end());
}
// Logits of every position: the first K tokens as one pass, then one at a time.
std::vector<float> logits(const Model& m, const std::vector<int32_t>& ids, size_t K) {
  Session s(m);
  std::vector<float> out = s.feed_all(std::vector<int32_t>(ids.begin(), ids.begin() + long(K)));
  for (size_t t = K; t < ids.size(); ++t) {
    auto l = s.feed_all({ids[t]});
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

class CudaGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGolden, WithinFiveTimesTheCpuError) {
  const std::string name = GetParam();
  auto ids = golden_ids(name);
  auto ref = test::read_f64(ref_file(name), "logits");
  auto c = load_model(model_dir(name));
  auto g = load_model(model_dir(name), on_gpu());
  const int64_t V = c->info().vocab;
  for (size_t K : {ids.size(), size_t(1), ids.size() / 2}) {
    auto lc = logits(*c, ids, K), lg = logits(*g, ids, K);
    const double ec = test::max_row_rel_error(std::vector<double>(lc.begin(), lc.end()), ref, V);
    const double eg = test::max_row_rel_error(std::vector<double>(lg.begin(), lg.end()), ref, V);
    std::printf("%-22s decode from %2zu: cpu error %.3g, cuda error %.3g (%.2fx)\n", name.c_str(), K, ec, eg,
                ec > 0 ? eg / ec : 0.0);
    EXPECT_LE(eg, std::max(5 * ec, 1e-6)) << "decode from " << K;
    EXPECT_LE(eg, 1e-3) << "decode from " << K;
  }
}

// Speculation needs a position's logits to be the same bits alone or in a batch.
TEST_P(CudaGolden, BatchedLogitsEqualOneTokenAtATime) {
  const std::string name = GetParam();
  auto g = load_model(model_dir(name), on_gpu());
  auto ids = golden_ids(name);
  auto batched = logits(*g, ids, ids.size());
  auto single = logits(*g, ids, 1);
  ASSERT_EQ(batched.size(), single.size());
  EXPECT_EQ(0, std::memcmp(batched.data(), single.data(), batched.size() * 4));
}

// A long prompt layer by layer (Model::forward_span: attention chunk by chunk, a MoE layer's
// experts in batches of a chunk's rows, the batches' sums added in expert-id order) gives the
// bits of chunk-by-chunk passes on the GPU too, then the same decoded logits.
TEST_P(CudaGolden, LayerByLayerPrefillGivesTheChunksBits) {
  const std::string name = GetParam();
  auto g = load_model(model_dir(name), on_gpu());
  const int64_t ctx = g->info().max_positions > 0 ? g->info().max_positions : 1 << 20;
  const int64_t n = std::min<int64_t>(300, ctx - 4), chunk = (n + 4) / 5;
  const std::vector<int32_t> prompt = test::spread_prompt(n, g->info().vocab);
  Session chunks(*g), span(*g);
  chunks.set_prefill_chunk(chunk);
  chunks.set_prefill_span(0);
  span.set_prefill_chunk(chunk);
  span.set_prefill_span(2 * chunk + 2);
  const std::vector<float> want = chunks.feed(prompt);
  EXPECT_EQ(span.feed(prompt), want);
  EXPECT_EQ(span.feed({prompt[7]}), chunks.feed({prompt[7]})) << "the decoded token after the prompt";
}

// Experts streamed from disk into a small RAM cache, and a VRAM cache small
// enough to evict, give the bits of every expert resident.
TEST_P(CudaGolden, StreamedAndEvictingEqualResident) {
  const std::string name = GetParam();
  auto ids = golden_ids(name);
  LoadOptions resident = on_gpu();
  resident.vram_experts = false;  // experts copied in for each use
  auto want = logits(*load_model(model_dir(name), resident), ids, ids.size() / 2);
  {
    auto cached = load_model(model_dir(name), on_gpu());  // VRAM cache of every expert
    EXPECT_EQ(logits(*cached, ids, ids.size() / 2), want) << "VRAM cache";
    EXPECT_GT(cached->expert_stats().device_hits, 0u);
  }
  // Streamed into a small RAM cache, copied in for each use.
  LoadOptions streamed = on_gpu();
  streamed.stream_experts = true;
  streamed.streaming.cache_bytes = 256u << 10;
  streamed.vram_experts = false;
  {
    auto m = load_model(model_dir(name), streamed);
    EXPECT_EQ(logits(*m, ids, ids.size() / 2), want) << "streamed";
    EXPECT_GT(m->expert_stats().bytes_read, 0u);
  }
  // Streamed, and a VRAM cache of three experts (the reserve is 512 MiB at this size): misses pass
  // to the streaming reader, evicted experts are copied in again.
  uint64_t one = 0;
  {
    auto probe = load_model(model_dir(name), on_gpu());
    one = device_expert_bytes(probe->backend(), probe->experts());
    streamed.vram_budget = (512ull << 20) + probe->plan().vram_spine + probe->plan().state + 3 * one + one / 2;
  }
  streamed.vram_experts = true;
  auto m = load_model(model_dir(name), streamed);
  EXPECT_EQ(m->plan().vram_expert_cache, 3 * one);
  EXPECT_EQ(logits(*m, ids, ids.size() / 2), want) << "streamed through a small VRAM cache";
  EXPECT_GT(m->expert_stats().device_bytes_copied, 3 * one);  // evicted experts were copied in again
}

// Experts computed on the host beside the GPU (compute/host_experts.h): every expert
// (--experts-on cpu), and a fixed set of three in VRAM with the rest on the host for
// passes of few rows (auto). Each within five times the CPU's error, like the GPU alone;
// each deterministic (the same bits on a second run, a placement never decided by timing).
TEST_P(CudaGolden, HostComputedExpertsWithinFiveTimesTheCpuError) {
  const std::string name = GetParam();
  auto ids = golden_ids(name);
  auto ref = test::read_f64(ref_file(name), "logits");
  auto c = load_model(model_dir(name));
  const int64_t V = c->info().vocab;
  const size_t K = ids.size() / 2;
  auto lc = logits(*c, ids, K);
  const double ec = test::max_row_rel_error(std::vector<double>(lc.begin(), lc.end()), ref, V);
  uint64_t one = 0, budget = 0;
  {
    auto probe = load_model(model_dir(name), on_gpu());
    one = device_expert_bytes(probe->backend(), probe->experts());
    budget = (512ull << 20) + probe->plan().vram_spine + probe->plan().state + 3 * one + one / 2;
  }
  for (const ExpertsOn where : {ExpertsOn::Cpu, ExpertsOn::Auto}) {
    const char* what = where == ExpertsOn::Cpu ? "cpu" : "auto";
    LoadOptions o = on_gpu();
    o.experts_on = where;
    o.host_expert_rows = 16;  // given, not measured: auto splits whatever this machine measures
    o.vram_budget = budget;
    auto g = load_model(model_dir(name), o);
    auto lg = logits(*g, ids, K);
    const double eg = test::max_row_rel_error(std::vector<double>(lg.begin(), lg.end()), ref, V);
    std::printf("%-22s --experts-on %-4s: cpu error %.3g, cuda + host error %.3g (%.2fx)\n", name.c_str(), what, ec,
                eg, ec > 0 ? eg / ec : 0.0);
    EXPECT_LE(eg, std::max(5 * ec, 1e-6)) << what;
    const ExpertStats st = g->expert_stats();
    EXPECT_GT(st.host_expert_calls, 0u) << what;
    if (where == ExpertsOn::Cpu) {
      EXPECT_EQ(g->plan().vram_expert_cache, 0u);
      EXPECT_EQ(st.device_expert_calls, 0u);
    } else {
      EXPECT_EQ(g->plan().vram_expert_cache, 3 * one);
      EXPECT_GT(st.device_expert_calls, 0u);  // the three in VRAM
    }
    auto again = load_model(model_dir(name), o);
    EXPECT_EQ(logits(*again, ids, K), lg) << what << ": a second run";
  }
}

// --experts-on auto without --host-expert-rows measures at load and installs what it chose: the row
// bound of compute/host_experts.h from the measurement, or exactly gpu's plan (the evicting VRAM cache,
// no host policy) when the host is never faster.
TEST(CudaExpertPlacement, AutoMeasuresAtLoadAndInstallsItsChoice) {
  LoadOptions o = on_gpu();
  o.experts_on = ExpertsOn::Auto;
  auto m = load_model(model_dir("deepseek_v3_tiny_int4"), o);
  const ExpertPlacement* p = m->expert_placement();
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->measured.has_value());
  const HostExpertMeasurement& x = *p->measured;
  std::printf("%s\n", p->describe().c_str());
  EXPECT_GT(x.copy_gbps, 0);
  // From 1 row up to the count that decided (all five when the host wins at each).
  ASSERT_GE(x.host_seconds.size(), 1u);
  ASSERT_LE(x.host_seconds.size(), 5u);
  for (size_t i = 0; i < x.host_seconds.size(); ++i) {
    EXPECT_EQ(x.host_seconds[i].first, int64_t(1) << i);
    EXPECT_GT(x.host_seconds[i].second, 0);
  }
  EXPECT_LT(x.seconds, 1.0);  // short enough to run at every load
  const int64_t bound = host_expert_max_rows(x.host_seconds, x.bytes, x.copy_gbps, kHostExpertMargin);
  if (bound <= 1) {
    EXPECT_EQ(p->runs, ExpertsOn::Gpu);
    EXPECT_EQ(p->host_experts(cpu_backend()), nullptr);
  } else {
    EXPECT_EQ(p->runs, ExpertsOn::Auto);
    EXPECT_EQ(p->host_max_rows, bound);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaGolden, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace sluice

// Without a GPU the suite reports itself skipped to a plain `ctest` (exit 77),
// and fails when SLUICE_REQUIRE_GPU is set (scripts/test-gpu.sh sets it).
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const char* req = std::getenv("SLUICE_REQUIRE_GPU");
  const bool listing = ::testing::GTEST_FLAG(list_tests);
  if (!listing && sluice::cuda_report().devices.empty() && !(req && *req && std::strcmp(req, "0") != 0)) {
    std::fprintf(stderr, "no CUDA device: CUDA tests skipped (scripts/test-gpu.sh runs them and requires a GPU)\n");
    return 77;
  }
  return RUN_ALL_TESTS();
}
