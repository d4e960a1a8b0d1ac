// SIMD versions of the small f32 vector operations of kernels/ops.h, one
// Highway source per ISA like the matrix kernels. axpy/scale/add do the same
// multiply and add per element as the scalar code (no fusion), so they give
// the same bits on every ISA; dot sums in an order fixed per ISA.
#include "kernels/vector_ops.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/vector_ops_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_NEON

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
constexpr int64_t kN = int64_t(hn::MaxLanes(DF()));

// Four accumulators over 4-vector chunks, then whole vectors into the first,
// then a fixed tree and the scalar tail.
float Dot(const float* a, const float* b, int64_t n) {
  const DF df;
  VF s0 = hn::Zero(df), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 4 * kN <= n; i += 4 * kN) {
    s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(df, a + i + kN), hn::LoadU(df, b + i + kN), s1);
    s2 = hn::MulAdd(hn::LoadU(df, a + i + 2 * kN), hn::LoadU(df, b + i + 2 * kN), s2);
    s3 = hn::MulAdd(hn::LoadU(df, a + i + 3 * kN), hn::LoadU(df, b + i + 3 * kN), s3);
  }
  for (; i + kN <= n; i += kN) s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void Axpy(float a, const float* x, float* y, int64_t n) {
  const DF df;
  const VF va = hn::Set(df, a);
  int64_t i = 0;
  for (; i + kN <= n; i += kN) hn::StoreU(hn::Add(hn::LoadU(df, y + i), hn::Mul(va, hn::LoadU(df, x + i))), df, y + i);
  for (; i < n; ++i) y[i] += a * x[i];
}

void Scale(float* x, float a, int64_t n) {
  const DF df;
  const VF va = hn::Set(df, a);
  int64_t i = 0;
  for (; i + kN <= n; i += kN) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), va), df, x + i);
  for (; i < n; ++i) x[i] *= a;
}

void Add(const float* x, float* y, int64_t n) {
  const DF df;
  int64_t i = 0;
  for (; i + kN <= n; i += kN) hn::StoreU(hn::Add(hn::LoadU(df, y + i), hn::LoadU(df, x + i)), df, y + i);
  for (; i < n; ++i) y[i] += x[i];
}

#endif
}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace sluice::kernels {

std::span<const VectorOps> simd_vector_ops() {
  static const VectorOps table[] = {
#if HWY_TARGETS & HWY_AVX3
      {HWY_AVX3, &N_AVX3::Dot, &N_AVX3::Axpy, &N_AVX3::Scale, &N_AVX3::Add},
#endif
#if HWY_TARGETS & HWY_AVX2
      {HWY_AVX2, &N_AVX2::Dot, &N_AVX2::Axpy, &N_AVX2::Scale, &N_AVX2::Add},
#endif
#if HWY_TARGETS & HWY_NEON
      {HWY_NEON, &N_NEON::Dot, &N_NEON::Axpy, &N_NEON::Scale, &N_NEON::Add},
#endif
      {0, nullptr, nullptr, nullptr, nullptr},  // end
  };
  return {table, sizeof(table) / sizeof(table[0]) - 1};
}

}  // namespace sluice::kernels
#endif
