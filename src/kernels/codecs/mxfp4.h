// MXFP4 (WeightFormat::MXFP4, OCP microscaling): E2M1 nibbles (low nibble =
// even column), one E8M0 scale byte (2^(e-127)) per 32 columns of a row.
#ifndef SLUICE_KERNELS_CODECS_MXFP4_H_
#define SLUICE_KERNELS_CODECS_MXFP4_H_
#include "kernels/codecs/codec.h"

namespace sluice::codecs {
struct Mxfp4 {
  static float decode(const QMatrix& W, int64_t r, int64_t c) {
    const uint8_t* s = static_cast<const uint8_t*>(W.scale) + (W.row0 + r) * W.scale_stride;
    const int u = (row_values<uint8_t>(W, r)[c >> 1] >> ((c & 1) * 4)) & 15;
    return kFp4Values[u] * e8m0_to_f32(s[c >> 5]);
  }
  static WeightBytes scale_bytes(const QMatrix& W) { return per_row_scales(W, W.scale_stride); }
};
}  // namespace sluice::codecs
#endif  // SLUICE_KERNELS_CODECS_MXFP4_H_

// ---- the SIMD decoder (once per Highway target, in kernels/matmul_simd.cpp)
#if defined(SLUICE_SIMD_CODECS) && (defined(SLUICE_KERNELS_CODECS_MXFP4_TOGGLE) == defined(HWY_TARGET_TOGGLE))
#ifdef SLUICE_KERNELS_CODECS_MXFP4_TOGGLE
#undef SLUICE_KERNELS_CODECS_MXFP4_TOGGLE
#else
#define SLUICE_KERNELS_CODECS_MXFP4_TOGGLE
#endif
#include "kernels/codecs/nibble-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {
#if SLUICE_KERNELS_DISPATCHED

inline const NibbleTables& mxfp4_tables() {
  static const NibbleTables t = nibble_tables(kFp4Values);
  return t;
}

// AVX2 looks up values already scaled (Mxfp4Avx2Decoder); the other targets
// share NibbleDecoder with int4.
#if HWY_TARGET == HWY_AVX2
struct Mxfp4Codec : Mxfp4Avx2Decoder, Codec<codecs::Mxfp4> {
  Mxfp4Codec() : Mxfp4Avx2Decoder(kFp4Values) {}
#else
struct Mxfp4Codec : NibbleDecoder, Codec<codecs::Mxfp4> {
  Mxfp4Codec() : NibbleDecoder(mxfp4_tables()) {}
#endif
  static const int16_t* perm() { return nibble_perm(); }
  static int64_t scale_row_bytes(const QMatrix& W) { return W.scale_stride; }
  // Row r's scale per 32-column segment (room for segments + kN floats); false when a
  // decoded weight could overflow f32 (e >= 253: 6 * 2^(253-127) overflows; 255 is NaN).
  // AVX2's decoder reads the scale bytes themselves (rs.aux).
  static void row_scales(const QMatrix& W, int64_t r, int64_t full, float* out, RowScales& rs) {
    const int64_t segments = full / 32;
    const uint8_t* s = static_cast<const uint8_t*>(W.scale) + (W.row0 + r) * W.scale_stride;
    rs.aux = s;
    const DU32 du;
    const hn::Rebind<uint8_t, DF> d8;
#if HWY_TARGET == HWY_AVX2
    // Only the check: the decoder's tables hold the scaled values.
    int64_t k = 0;
    auto top = hn::Zero(du);
    for (; k + kN <= segments; k += kN) top = hn::Max(top, hn::PromoteTo(du, hn::LoadU(d8, s + k)));
    bool ok = hn::GetLane(hn::MaxOfLanes(du, top)) < 253;
    for (; k < segments; ++k) ok &= s[k] < 253;
    rs.simd_ok = ok;
    rs.scales = out;
#else
    const DF df;
    int64_t k = 0;
    auto top = hn::Zero(du);
    for (; k + kN <= segments; k += kN) {
      const auto e = hn::PromoteTo(du, hn::LoadU(d8, s + k));
      top = hn::Max(top, e);
      // 2^(e-127); e = 0 is the subnormal 2^-127. (e >= 253 rows take the definition.)
      const auto bits = hn::IfThenElse(hn::Eq(e, hn::Zero(du)), hn::Set(du, 0x00400000u), hn::ShiftLeft<23>(e));
      hn::StoreU(hn::BitCast(df, bits), df, out + k);
    }
    bool ok = hn::GetLane(hn::MaxOfLanes(du, top)) < 253;
    for (; k < segments; ++k) {
      ok &= s[k] < 253;
      out[k] = e8m0_to_f32(s[k]);
    }
    pad_segment_scales(out, segments);
    rs.simd_ok = ok;
    rs.scales = out;
#endif
  }
};

#endif  // SLUICE_KERNELS_DISPATCHED
}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#endif  // toggle
