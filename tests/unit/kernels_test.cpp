// The matrix kernels of every compiled ISA against the scalar reference, and the
// scalar decode of each weight format against its definition.
//
// Tolerance: the SIMD kernels decode every weight exactly and differ from the
// reference only in the order of the f32 additions (and in applying a block's
// scale to the block's partial sum). Both orders are within n * 2^-24 * sum|w x|
// of the exact sum in the worst case, typically sqrt(n) * 2^-24 * sum|w x|:
// 2.7e-6 for the longest rows here (2055 columns). The bound used, 1e-5 *
// sum|w x| (+1e-30 for sums of subnormal terms), is a few times that.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/random_qmatrix.h"
#include "util/error.h"
#include "util/numeric.h"

namespace sluice::kernels_test {
namespace {

constexpr WeightFormat kFormats[] = {WeightFormat::F32,   WeightFormat::BF16,       WeightFormat::F16,
                                     WeightFormat::FP8_E4M3_BLOCK, WeightFormat::INT4_GROUP,
                                     WeightFormat::MXFP4, WeightFormat::INT8_ROW};

std::vector<float> random_x(int64_t n, int64_t ld, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(n * ld));
  for (auto& v : x) v = normal(rng);
  return x;
}

// Equal bits, or both NaN (NaN payloads are not part of any format's definition).
bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b)); }

// Compares a kernel output with the reference one; mag = sum_c |W[r,c] x[c]|.
void expect_close(double mag, float ref, float got, const std::string& where) {
  if (std::isnan(ref) || std::isnan(got)) {
    EXPECT_EQ(std::isnan(ref), std::isnan(got)) << where << ": reference " << ref << ", kernel " << got;
    return;
  }
  if (std::isinf(ref) || std::isinf(got)) {
    EXPECT_EQ(ref, got) << where;
    return;
  }
  EXPECT_LE(std::abs(double(ref) - double(got)), 1e-5 * mag + 1e-30) << where << ": reference " << ref << ", kernel " << got;
}

// Switches the process to one ISA for a test and back afterwards.
class IsaScope {
 public:
  explicit IsaScope(std::string_view name) : prev_(kernels::active_isa().name) { kernels::set_active_isa(name); }
  ~IsaScope() { kernels::set_active_isa(prev_); }

 private:
  std::string prev_;
};

class PerIsa : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const kernels::IsaKernels* isa = kernels::find_isa(GetParam());
    ASSERT_NE(isa, nullptr);
    if (!kernels::cpu_supports(*isa))
      GTEST_SKIP() << "ISA " << GetParam() << " is compiled in but this CPU does not support it: not run here";
    scope_ = std::make_unique<IsaScope>(GetParam());
  }
  void TearDown() override { scope_.reset(); }
  std::unique_ptr<IsaScope> scope_;
};

// Compares matmul under the active ISA with the reference kernel, every token.
// x_scale keeps products of huge weights inside f32 where a test needs that.
void check_against_reference(const QMatrix& W, int64_t n, uint64_t seed, const std::string& what,
                             float x_scale = 1.0f) {
  const int64_t ldx = W.cols + 3, ldy = W.rows + 1;
  std::vector<float> X = random_x(n, ldx, seed);
  for (auto& v : X) v *= x_scale;
  std::vector<float> Yref(size_t(n * ldy), -7.0f), Y(size_t(n * ldy), -7.0f);
  kernels::matmul_rows_ref(W, 0, W.rows, X.data(), n, ldx, Yref.data(), ldy);
  matmul(W, X.data(), n, ldx, Y.data(), ldy);
  std::vector<float> row(size_t(W.cols));
  for (int64_t r = 0; r < W.rows; ++r) {
    decode_row_ref(W, r, row.data());
    for (int64_t t = 0; t < n; ++t) {
      double mag = 0;
      for (int64_t c = 0; c < W.cols; ++c) mag += std::abs(double(row[size_t(c)]) * X[size_t(t * ldx + c)]);
      expect_close(mag, Yref[size_t(t * ldy + r)], Y[size_t(t * ldy + r)],
                   what + " n=" + std::to_string(n) + " token " + std::to_string(t) + " row " + std::to_string(r));
    }
  }
  for (int64_t t = 0; t < n; ++t)
    EXPECT_EQ(Y[size_t(t * ldy + W.rows)], -7.0f) << what << ": padding between rows of Y was written";
}

struct Shape {
  int64_t rows, cols;
};

TEST_P(PerIsa, EveryFormatMatchesReferenceOnAwkwardShapes) {
  for (WeightFormat fmt : kFormats) {
    const std::vector<Shape> shapes = {{1, 32}, {3, 15}, {7, 96}, {17, 33}, {37, 160}, {129, 288}, {131, 200}, {300, 2055}, {260, 2048}};
    uint64_t seed = 11;
    for (Shape sh : shapes) {
      OwnedQMatrix w = make_random_qmatrix(fmt, sh.rows, sh.cols, ++seed);
      for (int64_t n : {1, 2, 3, 4, 5, 7, 9, 17})
        check_against_reference(w.m, n, seed * 31 + uint64_t(n),
                                std::string(weight_format_name(fmt)) + " " + std::to_string(sh.rows) + "x" +
                                    std::to_string(sh.cols));
    }
  }
}

TEST_P(PerIsa, BlockAndGroupSizesAndRowSlices) {
  RandomQMatrixOptions opt;
  for (int32_t group : {64, 128}) {
    opt.int4_group = group;
    OwnedQMatrix w = make_random_qmatrix(WeightFormat::INT4_GROUP, 45, 640, 3, opt);
    for (int64_t n : {1, 6}) check_against_reference(w.m, n, 5, "int4 group " + std::to_string(group));
  }
  // fp8: rows crossing 128-row scale blocks, a slice starting inside a block, a ragged last block.
  OwnedQMatrix f = make_random_qmatrix(WeightFormat::FP8_E4M3_BLOCK, 300, 704, 4);
  for (int64_t n : {1, 3, 8}) {
    check_against_reference(f.m, n, 6, "fp8 300x704");
    check_against_reference(f.m.slice_rows(77, 150), n, 7, "fp8 slice 77+150");
  }
  OwnedQMatrix q = make_random_qmatrix(WeightFormat::INT4_GROUP, 200, 512, 8);
  check_against_reference(q.m.slice_rows(13, 101), 1, 9, "int4 slice");
  check_against_reference(q.m.slice_rows(13, 101), 5, 9, "int4 slice");
}

// Speculative decoding relies on this: a batch gives each token's outputs the
// bits that token alone gives, whatever the kernel variant and thread split.
TEST_P(PerIsa, BatchedEqualsOneTokenBitwise) {
  for (WeightFormat fmt : kFormats) {
    OwnedQMatrix w = make_random_qmatrix(fmt, 1003, 1000, 21);
    // 66: one 64-token block and a 2-token rest (kernels/matmul_simd.cpp's kTokenBlock).
    for (int64_t n : {2, 3, 4, 9, 16, 23, 66}) {
      std::vector<float> X = random_x(n, 1000, 100 + uint64_t(n));
      std::vector<float> Yb(size_t(n * 1003)), y1(1003);
      matmul(w.m, X.data(), n, 1000, Yb.data(), 1003);  // threaded over rows
      for (int64_t t = 0; t < n; ++t) {
        matvec(w.m, X.data() + t * 1000, y1.data());
        for (int64_t r = 0; r < 1003; ++r)
          ASSERT_TRUE(same_bits(y1[size_t(r)], Yb[size_t(t * 1003 + r)]))
              << weight_format_name(fmt) << " n=" << n << " token " << t << " row " << r << ": " << y1[size_t(r)]
              << " alone, " << Yb[size_t(t * 1003 + r)] << " in the batch";
      }
    }
  }
}

TEST_P(PerIsa, ThreadSplitDoesNotChangeBits) {
  for (WeightFormat fmt : kFormats) {
    OwnedQMatrix w = make_random_qmatrix(fmt, 1000, 512, 7);
    std::vector<float> x = random_x(1, 512, 1), a(1000), b(1000);
    matvec(w.m, x.data(), a.data());
    // Same rows, computed as many small products of one row each (one thread).
    for (int64_t r = 0; r < 1000; ++r) matvec(w.m.slice_rows(r, 1), x.data(), b.data() + r);
    for (int64_t r = 0; r < 1000; ++r) ASSERT_TRUE(same_bits(a[size_t(r)], b[size_t(r)])) << weight_format_name(fmt) << " row " << r;
  }
}

TEST_P(PerIsa, TransposedProductEqualsReferenceBitwise) {
  for (WeightFormat fmt : kFormats) {
    for (Shape sh : {Shape{128, 512}, Shape{37, 200}, Shape{5, 2055}}) {
      OwnedQMatrix w = make_random_qmatrix(fmt, sh.rows, sh.cols, 17);
      std::vector<float> a = random_x(1, sh.rows, 2);
      a[1] = 0.0f;  // skipped rows stay skipped
      std::vector<float> y0 = random_x(1, sh.cols, 3), yref = y0, y = y0;
      kernels::matvec_transposed_acc_ref(w.m, a.data(), yref.data());
      matvec_transposed_acc(w.m, a.data(), y.data());
      for (int64_t c = 0; c < sh.cols; ++c)
        ASSERT_TRUE(same_bits(yref[size_t(c)], y[size_t(c)]))
            << weight_format_name(fmt) << " " << sh.rows << "x" << sh.cols << " column " << c << ": reference "
            << yref[size_t(c)] << ", kernel " << y[size_t(c)];
    }
  }
}

// Every fp8 code, NaN codes included, in every position of a step: where the
// definition gives NaN the kernel must too.
TEST_P(PerIsa, AllFp8Codes) {
  OwnedQMatrix w = make_random_qmatrix(WeightFormat::FP8_E4M3_BLOCK, 256, 320, 5);
  std::vector<uint8_t> finite;
  for (int b = 0; b < 256; ++b)
    if ((b & 0x7f) != 0x7f) finite.push_back(uint8_t(b));
  for (int64_t r = 0; r < 128; ++r) {
    uint8_t* row = w.data.data() + r * 320;
    // Every finite code, at a different position of the step in each row ...
    for (int64_t c = 0; c < 320; ++c) row[c] = finite[size_t((c + 5 * r) % int64_t(finite.size()))];
    // ... and in rows 64..127 one NaN code each (rows 128..255 stay random).
    if (r >= 64) row[(r * 13) % 320] = r % 2 ? 0xff : 0x7f;
  }
  for (int64_t n : {1, 2, 5}) check_against_reference(w.m, n, 77, "fp8 all codes");
  std::vector<float> a = random_x(1, 256, 4), yref(320, 0.0f), y(320, 0.0f);
  kernels::matvec_transposed_acc_ref(w.m, a.data(), yref.data());
  matvec_transposed_acc(w.m, a.data(), y.data());
  for (int64_t c = 0; c < 320; ++c) ASSERT_TRUE(same_bits(yref[size_t(c)], y[size_t(c)])) << "column " << c;
}

// Every E8M0 scale byte (0: 2^-127, subnormal; 253/254: decoded weights that
// overflow f32; 255: NaN) in each segment position. Activations of about 2^-12
// keep the products of the finite weights (up to 6 * 2^125) finite.
TEST_P(PerIsa, AllE8m0ScaleBytes) {
  const int64_t cols = 256, segs = cols / 32;
  OwnedQMatrix w = make_random_qmatrix(WeightFormat::MXFP4, 256, cols, 9);
  for (int64_t r = 0; r < 256; ++r)
    for (int64_t k = 0; k < segs; ++k) w.scale[size_t(r * segs + k)] = k == r % segs ? uint8_t(r) : uint8_t(127);
  for (int64_t n : {1, 3, 6}) check_against_reference(w.m, n, 88, "mxfp4 all scales", 1.0f / 4096.0f);
}

// bf16 group scales at the edges: zero, subnormal, huge, inf, NaN.
TEST_P(PerIsa, Int4EdgeScales) {
  OwnedQMatrix w = make_random_qmatrix(WeightFormat::INT4_GROUP, 64, 256, 10);
  const float edge[] = {0.0f, -0.0f, 1e-40f, 3e38f, 1e30f, INFINITY, -INFINITY, NAN};
  for (int64_t r = 0; r < 64; ++r) {
    uint16_t h = f32_to_bf16(edge[r % 8]);
    std::memcpy(w.scale.data() + 2 * (r * 8 + (r / 8) % 8), &h, 2);
  }
  for (int64_t n : {1, 4}) check_against_reference(w.m, n, 99, "int4 edge scales");
}

// axpy, scale and add do the scalar code's operations in every lane: same bits
// on every ISA. dot sums in another order: within the f32 reassociation bound.
TEST_P(PerIsa, VectorOpsMatchReference) {
  for (int64_t n : {1, 7, 8, 31, 64, 127, 128, 1000}) {
    std::vector<float> a = random_x(1, n, 5 + uint64_t(n)), b = random_x(1, n, 6 + uint64_t(n));
    std::vector<float> y1 = b, y2 = b;
    ops::axpy_ref(0.37f, a.data(), y1.data(), n);
    ops::axpy(0.37f, a.data(), y2.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(y1[size_t(i)], y2[size_t(i)])) << "axpy n=" << n << " i=" << i;
    ops::scale_ref(y1.data(), -1.7f, n);
    ops::scale(y2.data(), -1.7f, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(y1[size_t(i)], y2[size_t(i)])) << "scale n=" << n << " i=" << i;
    ops::add_ref(a.data(), y1.data(), n);
    ops::add(a.data(), y2.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(y1[size_t(i)], y2[size_t(i)])) << "add n=" << n << " i=" << i;
    double mag = 0;
    for (int64_t i = 0; i < n; ++i) mag += std::abs(double(a[size_t(i)]) * b[size_t(i)]);
    expect_close(mag, ops::dot_ref(a.data(), b.data(), n), ops::dot(a.data(), b.data(), n), "dot n=" + std::to_string(n));
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, PerIsa, ::testing::ValuesIn([] {
                           std::vector<std::string> v;
                           for (const auto& isa : kernels::compiled_isas())
                             if (isa.hwy_target != 0) v.emplace_back(isa.name);
                           return v;
                         }()),
                         [](const auto& info) { return info.param; });

TEST(Isa, ChoosesBestSupportedOrTheForcedOne) {
  std::cout << "[ kernels ] compiled: " << kernels::describe_isas() << "; active: " << kernels::active_isa().name
            << std::endl;
  const auto isas = kernels::compiled_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.back().name, "scalar");
  if (const char* env = std::getenv("SLUICE_ISA"); env && *env) {
    EXPECT_EQ(kernels::active_isa().name, env);
  } else {
    for (const auto& isa : isas)
      if (kernels::cpu_supports(isa)) {
        EXPECT_EQ(kernels::active_isa().name, isa.name);
        break;
      }
  }
#if defined(__x86_64__)
  ASSERT_NE(kernels::find_isa("avx2"), nullptr);
  ASSERT_NE(kernels::find_isa("avx512"), nullptr);
#elif defined(__aarch64__)
  ASSERT_NE(kernels::find_isa("neon"), nullptr);
#endif
  EXPECT_THROW(kernels::set_active_isa("no-such-isa"), Error);
}

TEST(Decode, Fp8E4m3MatchesDefinition) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 1.0f / 512.0f);  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);           // e=7, m=0
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);         // max
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

}  // namespace
}  // namespace sluice::kernels_test
