// f32 (WeightFormat::F32): four bytes per weight, used as stored.
#ifndef SLUICE_KERNELS_CODECS_F32_H_
#define SLUICE_KERNELS_CODECS_F32_H_
#include "kernels/codecs/codec.h"

namespace sluice::codecs {
struct F32 : Unscaled {
  static float decode(const QMatrix& W, int64_t r, int64_t c) { return row_values<float>(W, r)[c]; }
};
}  // namespace sluice::codecs
#endif  // SLUICE_KERNELS_CODECS_F32_H_

// ---- the SIMD decoder (once per Highway target, in kernels/matmul_simd.cpp)
#if defined(SLUICE_SIMD_CODECS) && (defined(SLUICE_KERNELS_CODECS_F32_TOGGLE) == defined(HWY_TARGET_TOGGLE))
#ifdef SLUICE_KERNELS_CODECS_F32_TOGGLE
#undef SLUICE_KERNELS_CODECS_F32_TOGGLE
#else
#define SLUICE_KERNELS_CODECS_F32_TOGGLE
#endif
#include "kernels/codecs/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {
#if SLUICE_KERNELS_DISPATCHED

struct F32Codec : Codec<codecs::F32> {
  static constexpr int64_t S = kN, V = 1, kStepBytes = 4 * S;
  static constexpr bool kScaled = false;
  static HWY_INLINE void step(const uint8_t* row, int64_t s, VF* w) {
    w[0] = hn::LoadU(DF(), reinterpret_cast<const float*>(row) + s * S);
  }
};

#endif  // SLUICE_KERNELS_DISPATCHED
}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#endif  // toggle
