// bf16 (WeightFormat::BF16): the upper 16 bits of an f32, no scales.
#ifndef SLUICE_KERNELS_CODECS_BF16_H_
#define SLUICE_KERNELS_CODECS_BF16_H_
#include "kernels/codecs/codec.h"

namespace sluice::codecs {
struct Bf16 : Unscaled {
  static float decode(const QMatrix& W, int64_t r, int64_t c) { return bf16_to_f32(row_values<uint16_t>(W, r)[c]); }
};
}  // namespace sluice::codecs
#endif  // SLUICE_KERNELS_CODECS_BF16_H_

// ---- the SIMD decoder (once per Highway target, in kernels/matmul_simd.cpp)
#if defined(SLUICE_SIMD_CODECS) && (defined(SLUICE_KERNELS_CODECS_BF16_TOGGLE) == defined(HWY_TARGET_TOGGLE))
#ifdef SLUICE_KERNELS_CODECS_BF16_TOGGLE
#undef SLUICE_KERNELS_CODECS_BF16_TOGGLE
#else
#define SLUICE_KERNELS_CODECS_BF16_TOGGLE
#endif
#include "kernels/codecs/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {
#if SLUICE_KERNELS_DISPATCHED

struct Bf16Codec : Codec<codecs::Bf16> {
  static constexpr int64_t S = kN, V = 1, kStepBytes = 2 * S;
  static constexpr bool kScaled = false;
  // Products of up to 16 tokens from register tiles straight from the weights
  // (kernels/matmul_simd.cpp's direct_tokens; measured on AVX2 only, Zen 3,
  // 2048 x 7168 x 16 tokens, 2 threads: 1.23-1.31x the panels).
  static constexpr int64_t kDirectTokens = HWY_TARGET == HWY_AVX2 ? 16 : 3;
  static HWY_INLINE void step(const uint8_t* row, int64_t s, VF* w) {
    const hn::Rebind<uint16_t, DF> d16;
    const auto h = hn::LoadU(d16, reinterpret_cast<const uint16_t*>(row) + s * S);
    w[0] = hn::BitCast(DF(), hn::ShiftLeft<16>(hn::PromoteTo(DU32(), h)));
  }
};

#endif  // SLUICE_KERNELS_DISPATCHED
}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#endif  // toggle
