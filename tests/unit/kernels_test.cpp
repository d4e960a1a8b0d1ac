// Each SIMD kernel against its scalar twin on random data of awkward sizes,
// and the scalar decode of each weight format against its definition.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/matmul.h"
#include "util/numeric.h"

namespace sluice {
namespace {

struct Owned {
  std::vector<uint8_t> data;
  std::vector<uint8_t> scale;
  QMatrix m;
};

Owned random_matrix(WeightFormat fmt, int64_t rows, int64_t cols, std::mt19937& rng) {
  Owned o;
  QMatrix& m = o.m;
  m.fmt = fmt;
  m.rows = rows;
  m.cols = cols;
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill_bytes = [&](std::vector<uint8_t>& v, size_t n) {
    v.resize(n);
    for (auto& b : v) b = uint8_t(byte(rng));
  };
  switch (fmt) {
    case WeightFormat::F32: {
      m.row_bytes = cols * 4;
      o.data.resize(size_t(rows * m.row_bytes));
      for (int64_t i = 0; i < rows * cols; ++i) {
        float f = normal(rng);
        std::memcpy(o.data.data() + 4 * i, &f, 4);
      }
      break;
    }
    case WeightFormat::BF16:
    case WeightFormat::F16: {
      m.row_bytes = cols * 2;
      o.data.resize(size_t(rows * m.row_bytes));
      for (int64_t i = 0; i < rows * cols; ++i) {
        float f = normal(rng);
        uint16_t h = f32_to_bf16(f);
        if (fmt == WeightFormat::F16) h = uint16_t(byte(rng) | ((byte(rng) & 0x3b) << 8));  // finite halves
        std::memcpy(o.data.data() + 2 * i, &h, 2);
      }
      break;
    }
    case WeightFormat::FP8_E4M3_BLOCK: {
      m.row_bytes = cols;
      fill_bytes(o.data, size_t(rows * cols));
      for (auto& b : o.data)
        if ((b & 0x7f) == 0x7f) b &= 0xfe;  // no NaN codes
      m.block = 128;
      m.scale_stride = (cols + 127) / 128;
      std::vector<float> s(size_t(((rows + 127) / 128) * m.scale_stride));
      for (auto& v : s) v = std::abs(normal(rng)) * 0.01f;
      o.scale.resize(s.size() * 4);
      std::memcpy(o.scale.data(), s.data(), o.scale.size());
      break;
    }
    case WeightFormat::INT4_GROUP: {
      m.row_bytes = cols / 2;
      fill_bytes(o.data, size_t(rows * m.row_bytes));
      m.group = 32;
      m.scale_stride = cols / 32;
      o.scale.resize(size_t(rows * m.scale_stride * 2));
      for (int64_t i = 0; i < rows * m.scale_stride; ++i) {
        uint16_t h = f32_to_bf16(std::abs(normal(rng)) * 0.1f);
        std::memcpy(o.scale.data() + 2 * i, &h, 2);
      }
      break;
    }
    case WeightFormat::MXFP4: {
      m.row_bytes = cols / 2;
      fill_bytes(o.data, size_t(rows * m.row_bytes));
      m.scale_stride = cols / 32;
      o.scale.resize(size_t(rows * m.scale_stride));
      for (auto& b : o.scale) b = uint8_t(118 + byte(rng) % 12);
      break;
    }
    case WeightFormat::INT8_ROW: {
      m.row_bytes = cols;
      fill_bytes(o.data, size_t(rows * cols));
      std::vector<float> s(static_cast<size_t>(rows));
      for (auto& v : s) v = std::abs(normal(rng)) * 0.01f;
      o.scale.resize(s.size() * 4);
      std::memcpy(o.scale.data(), s.data(), o.scale.size());
      break;
    }
  }
  m.data = o.data.data();
  m.scale = o.scale.empty() ? nullptr : o.scale.data();
  return o;
}

struct Shape {
  int64_t rows, cols;
};

class MatmulSimd : public ::testing::TestWithParam<WeightFormat> {};

TEST_P(MatmulSimd, MatchesScalarTwinOnAwkwardShapes) {
  if (!kernels::cpu_has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  const WeightFormat fmt = GetParam();
  const bool block32 = fmt == WeightFormat::INT4_GROUP || fmt == WeightFormat::MXFP4;
  std::vector<Shape> shapes = block32 ? std::vector<Shape>{{1, 32}, {7, 96}, {37, 160}, {129, 288}, {300, 2048}}
                                      : std::vector<Shape>{{1, 1}, {3, 15}, {17, 33}, {131, 200}, {257, 1000}, {300, 2055}};
  std::mt19937 rng(1234);
  for (auto sh : shapes) {
    Owned w = random_matrix(fmt, sh.rows, sh.cols, rng);
    for (int64_t n : {1, 2, 5, 9}) {
      std::normal_distribution<float> normal(0.0f, 1.0f);
      const int64_t ldx = sh.cols + 3, ldy = sh.rows + 1;
      std::vector<float> X(size_t(n * ldx)), Yref(size_t(n * ldy), -7.0f), Ysimd(size_t(n * ldy), -7.0f);
      for (auto& v : X) v = normal(rng);
      kernels::matmul_rows_ref(w.m, 0, sh.rows, X.data(), n, ldx, Yref.data(), ldy);
      kernels::matmul_rows_avx512(w.m, 0, sh.rows, X.data(), n, ldx, Ysimd.data(), ldy);
      // Exact decode, different summation order: compare against the scale of the terms.
      std::vector<float> row(size_t(sh.cols));
      for (int64_t r = 0; r < sh.rows; ++r) {
        decode_row_ref(w.m, r, row.data());
        for (int64_t i = 0; i < n; ++i) {
          double mag = 0;
          for (int64_t c = 0; c < sh.cols; ++c) mag += std::abs(double(row[size_t(c)]) * X[size_t(i * ldx + c)]);
          const float a = Yref[size_t(i * ldy + r)], b = Ysimd[size_t(i * ldy + r)];
          ASSERT_LE(std::abs(double(a) - double(b)), 1e-5 * mag + 1e-30)
              << weight_format_name(fmt) << " " << sh.rows << "x" << sh.cols << " n=" << n << " row " << r;
        }
      }
      // Padding between rows of Y stays untouched.
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(Ysimd[size_t(i * ldy + sh.rows)], -7.0f);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, MatmulSimd,
                         ::testing::Values(WeightFormat::F32, WeightFormat::BF16, WeightFormat::F16,
                                           WeightFormat::FP8_E4M3_BLOCK, WeightFormat::INT4_GROUP,
                                           WeightFormat::MXFP4, WeightFormat::INT8_ROW),
                         [](const auto& info) { return std::string(weight_format_name(info.param)); });

TEST(Decode, Fp8E4m3MatchesDefinition) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 1.0f / 512.0f);        // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);                 // e=7, m=0
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);               // max
  EXPECT_EQ(fp8_e4m3_to_f32(0xc0), -2.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
}

TEST(Decode, Mxfp4AndInt4Nibbles) {
  // Row of 32 values: byte k holds elements 2k (low nibble) and 2k+1 (high nibble).
  std::vector<uint8_t> data(16), mx_scale{128};  // 2^1
  data[0] = 0x72;                                  // e0 = code 2 (1.0), e1 = code 7 (6.0)
  data[1] = 0x9f;                                  // e2 = code 15 (-6.0), e3 = code 9 (-0.5)
  QMatrix m;
  m.fmt = WeightFormat::MXFP4;
  m.rows = 1;
  m.cols = 32;
  m.row_bytes = 16;
  m.data = data.data();
  m.scale = mx_scale.data();
  m.scale_stride = 1;
  EXPECT_EQ(decode_elem_ref(m, 0, 0), 2.0f);
  EXPECT_EQ(decode_elem_ref(m, 0, 1), 12.0f);
  EXPECT_EQ(decode_elem_ref(m, 0, 2), -12.0f);
  EXPECT_EQ(decode_elem_ref(m, 0, 3), -1.0f);
  std::vector<uint16_t> s4{f32_to_bf16(0.5f)};
  m.fmt = WeightFormat::INT4_GROUP;
  m.scale = s4.data();
  m.group = 32;
  EXPECT_EQ(decode_elem_ref(m, 0, 0), (2 - 8) * 0.5f);
  EXPECT_EQ(decode_elem_ref(m, 0, 1), (7 - 8) * 0.5f);
  EXPECT_EQ(decode_elem_ref(m, 0, 2), (15 - 8) * 0.5f);
}

TEST(Matmul, ThreadedEqualsSingleRangeResult) {
  std::mt19937 rng(7);
  Owned w = random_matrix(WeightFormat::BF16, 1000, 512, rng);
  std::vector<float> x(512), a(1000), b(1000);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  matvec(w.m, x.data(), a.data());
  (kernels::simd_enabled() ? kernels::matmul_rows_avx512 : kernels::matmul_rows_ref)(w.m, 0, 1000, x.data(), 1, 512,
                                                                                     b.data(), 1000);
  EXPECT_EQ(a, b);  // each row is computed the same way whichever thread does it
}

}  // namespace
}  // namespace sluice
