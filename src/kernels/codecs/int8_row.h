// int8 with a row scale (WeightFormat::INT8_ROW, `sluice prepare --spine int8`):
// value = code * scale[row], one f32 scale per row.
#ifndef SLUICE_KERNELS_CODECS_INT8_ROW_H_
#define SLUICE_KERNELS_CODECS_INT8_ROW_H_
#include "kernels/codecs/codec.h"

namespace sluice::codecs {
struct Int8Row {
  static float decode(const QMatrix& W, int64_t r, int64_t c) {
    return float(row_values<int8_t>(W, r)[c]) * static_cast<const float*>(W.scale)[W.row0 + r];
  }
  static WeightBytes scale_bytes(const QMatrix& W) { return per_row_scales(W, 4); }
};
}  // namespace sluice::codecs
#endif  // SLUICE_KERNELS_CODECS_INT8_ROW_H_

// ---- the SIMD decoder (once per Highway target, in kernels/matmul_simd.cpp)
#if defined(SLUICE_SIMD_CODECS) && (defined(SLUICE_KERNELS_CODECS_INT8_ROW_TOGGLE) == defined(HWY_TARGET_TOGGLE))
#ifdef SLUICE_KERNELS_CODECS_INT8_ROW_TOGGLE
#undef SLUICE_KERNELS_CODECS_INT8_ROW_TOGGLE
#else
#define SLUICE_KERNELS_CODECS_INT8_ROW_TOGGLE
#endif
#include "kernels/codecs/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {
#if SLUICE_KERNELS_DISPATCHED

// The codes are accumulated as they are; the row scale multiplies the final sum.
struct Int8RowCodec : Codec<codecs::Int8Row> {
  static constexpr int64_t S = kN, V = 1, kStepBytes = S;
  static constexpr bool kScaled = false, kRowScale = true;
  // Products of up to 16 tokens from register tiles straight from the weights
  // (kernels/matmul_simd.cpp's direct_tokens; measured on AVX2 only, Zen 3,
  // 2048 x 7168 x 16 tokens, 2 threads: 1.23-1.31x the panels).
  static constexpr int64_t kDirectTokens = HWY_TARGET == HWY_AVX2 ? 16 : 3;
  static HWY_INLINE void step(const uint8_t* row, int64_t s, VF* w) {
    const hn::Rebind<int8_t, DF> d8;
    const auto q = hn::LoadU(d8, reinterpret_cast<const int8_t*>(row) + s * S);
    w[0] = hn::ConvertTo(DF(), hn::PromoteTo(DI32(), q));
  }
  static void row_scales(const QMatrix& W, int64_t r, int64_t, float*, RowScales& rs) {
    rs.final_scale = static_cast<const float*>(W.scale)[W.row0 + r];
    rs.simd_ok = std::abs(rs.final_scale) * 128.0f <= kFltMax;
  }
  static float tail(const QMatrix& W, int64_t r, int64_t c) { return float(codecs::row_values<int8_t>(W, r)[c]); }
};

#endif  // SLUICE_KERNELS_DISPATCHED
}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#endif  // toggle
