// INT4 with group scales (WeightFormat::INT4_GROUP, compressed-tensors
// pack-quantized): nibble u (low nibble = even column), value (u - 8) * scale,
// one bf16 scale per `group` columns of a row.
#ifndef SLUICE_KERNELS_CODECS_INT4_GROUP_H_
#define SLUICE_KERNELS_CODECS_INT4_GROUP_H_
#include "kernels/codecs/codec.h"

namespace sluice::codecs {
struct Int4Group {
  static float decode(const QMatrix& W, int64_t r, int64_t c) {
    const uint16_t* s = static_cast<const uint16_t*>(W.scale) + (W.row0 + r) * W.scale_stride;
    const int u = (row_values<uint8_t>(W, r)[c >> 1] >> ((c & 1) * 4)) & 15;
    return float(u - 8) * bf16_to_f32(s[c / W.group]);
  }
  static WeightBytes scale_bytes(const QMatrix& W) { return per_row_scales(W, 2 * W.scale_stride); }
};
}  // namespace sluice::codecs
#endif  // SLUICE_KERNELS_CODECS_INT4_GROUP_H_

// ---- the SIMD decoder (once per Highway target, in kernels/matmul_simd.cpp)
#if defined(SLUICE_SIMD_CODECS) && (defined(SLUICE_KERNELS_CODECS_INT4_GROUP_TOGGLE) == defined(HWY_TARGET_TOGGLE))
#ifdef SLUICE_KERNELS_CODECS_INT4_GROUP_TOGGLE
#undef SLUICE_KERNELS_CODECS_INT4_GROUP_TOGGLE
#else
#define SLUICE_KERNELS_CODECS_INT4_GROUP_TOGGLE
#endif
#include "kernels/codecs/nibble-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {
#if SLUICE_KERNELS_DISPATCHED

inline const NibbleTables& int4_tables() {
  static const NibbleTables t = [] {
    float v[16];
    for (int u = 0; u < 16; ++u) v[u] = float(u - 8);
    return nibble_tables(v);
  }();
  return t;
}

// AVX2 decodes int4 with integer operations and one FMA (Int4Avx2Decoder);
// the other targets share NibbleDecoder with mxfp4.
#if HWY_TARGET == HWY_AVX2
using Int4Decoder = Int4Avx2Decoder;
#else
using Int4Decoder = NibbleDecoder;
#endif

struct Int4GroupCodec : Int4Decoder, Codec<codecs::Int4Group> {
  Int4GroupCodec() : Int4Decoder(int4_tables()) {}
  static bool handles(const QMatrix& W) { return W.group > 0 && W.group % 32 == 0; }
  static const int16_t* perm() {
#if HWY_TARGET == HWY_AVX2
    static const std::vector<int16_t> p = probe_nibble_perm<Int4Decoder>();
    return p.data();
#else
    return nibble_perm();
#endif
  }
  // The largest |scale| the decoder takes (larger: the row takes the definition).
  static float max_scale() {
#if HWY_TARGET == HWY_AVX2
    return Int4Decoder::kMaxScale;
#else
    return kFltMax / 8.0f;  // |u - 8| <= 8
#endif
  }
  static int64_t scale_row_bytes(const QMatrix& W) { return 2 * W.scale_stride; }
  // Row r's scale per 32-column segment (room for segments + kN floats); false when a
  // decoded weight (or an intermediate of the decoder) could overflow f32, or a
  // scale is not finite. Vectorised for 32-column groups: per-row scale work is
  // otherwise as costly as decoding the row.
  static void row_scales(const QMatrix& W, int64_t r, int64_t full, float* out, RowScales& rs) {
    const int64_t segments = full / 32;
    const uint16_t* s = static_cast<const uint16_t*>(W.scale) + (W.row0 + r) * W.scale_stride;
    const DF df;
    const DU32 du;
    int64_t k = 0;
    bool ok = true;
    if (W.group == 32) {
      const hn::Rebind<uint16_t, DF> d16;
      const VF limit = hn::Set(df, max_scale());
      auto bad = hn::Zero(du);
      for (; k + kN <= segments; k += kN) {
        const VF v = hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, s + k))));
        hn::StoreU(v, df, out + k);
        bad = hn::Or(bad, hn::VecFromMask(du, hn::RebindMask(du, hn::Not(hn::Le(hn::Abs(v), limit)))));
      }
      ok = hn::AllTrue(du, hn::Eq(bad, hn::Zero(du)));
    }
    const int64_t per = W.group / 32;
    for (; k < segments; ++k) {
      const float v = bf16_to_f32(s[k / per]);
      ok &= std::abs(v) <= max_scale();
      out[k] = v;
    }
    pad_segment_scales(out, segments);
    rs.simd_ok = ok;
    rs.scales = out;
  }
};

#endif  // SLUICE_KERNELS_DISPATCHED
}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#endif  // toggle
