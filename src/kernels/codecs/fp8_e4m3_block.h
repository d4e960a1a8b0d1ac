// FP8 e4m3 with block scales (WeightFormat::FP8_E4M3_BLOCK, DeepSeek's
// "weight_scale_inv"): float8_e4m3fn codes, one f32 scale per block x block tile.
#ifndef SLUICE_KERNELS_CODECS_FP8_E4M3_BLOCK_H_
#define SLUICE_KERNELS_CODECS_FP8_E4M3_BLOCK_H_
#include <array>

#include "kernels/codecs/codec.h"

namespace sluice::codecs {
struct Fp8Block {
  // fp8_e4m3_to_f32 for all 256 codes (the definition stays in util/numeric.h).
  static const float* table() {
    static const auto t = [] {
      std::array<float, 256> v{};
      for (int b = 0; b < 256; ++b) v[size_t(b)] = fp8_e4m3_to_f32(uint8_t(b));
      return v;
    }();
    return t.data();
  }
  static float decode(const QMatrix& W, int64_t r, int64_t c) {
    const float* s = static_cast<const float*>(W.scale) + ((W.row0 + r) / W.block) * W.scale_stride;
    return table()[row_values<uint8_t>(W, r)[c]] * s[c / W.block];
  }
  // The block rows of scales the view's rows use.
  static WeightBytes scale_bytes(const QMatrix& W) {
    const int64_t first = W.row0 / W.block, last = (W.row0 + W.rows - 1) / W.block;
    return {static_cast<const uint8_t*>(W.scale) + first * W.scale_stride * 4,
            uint64_t((last - first + 1) * W.scale_stride * 4)};
  }
};
}  // namespace sluice::codecs
#endif  // SLUICE_KERNELS_CODECS_FP8_E4M3_BLOCK_H_

// ---- the SIMD decoder (once per Highway target, in kernels/matmul_simd.cpp)
#if defined(SLUICE_SIMD_CODECS) && (defined(SLUICE_KERNELS_CODECS_FP8_E4M3_BLOCK_TOGGLE) == defined(HWY_TARGET_TOGGLE))
#ifdef SLUICE_KERNELS_CODECS_FP8_E4M3_BLOCK_TOGGLE
#undef SLUICE_KERNELS_CODECS_FP8_E4M3_BLOCK_TOGGLE
#else
#define SLUICE_KERNELS_CODECS_FP8_E4M3_BLOCK_TOGGLE
#endif
#include "kernels/codecs/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {
#if SLUICE_KERNELS_DISPATCHED

// e4m3 bits moved into an f16 (sign to bit 15, exponent and mantissa to bits
// 13..7) are the e4m3 value times 2^-8, subnormals included; codes S.1111.111
// get exponent 11111 and a nonzero mantissa, an f16 NaN, like the definition.
// The step's block scale carries the 2^8 back, so (e4m3 * 2^-8) * (scale * 2^8)
// rounds once, like the definition.
struct Fp8BlockCodec : Codec<codecs::Fp8Block> {
  static constexpr int64_t S = 4 * kN, V = 4, kStepBytes = S;
  static constexpr bool kScaled = true;
  // A step in f16 form: 2 * kN f16 lanes each (columns in the order of the zips).
  struct Raw {
    hn::Vec<DU16> h0, h1;
    // Written out: GCC's implicit constructor lacks the target attributes on NEON.
    HWY_INLINE Raw() : h0(hn::Zero(DU16())), h1(h0) {}
    HWY_INLINE Raw(hn::Vec<DU16> a, hn::Vec<DU16> b) : h0(a), h1(b) {}
  };
  static constexpr int kParts = 2;  // part k: vectors 2k, 2k + 1 (from h_k)
  static HWY_INLINE Raw load(const uint8_t* row, int64_t s) {
    const DU8 d8;
    const DU16 d16;
    const VU8 b = hn::LoadU(d8, row + s * S);
    const VU8 sign = hn::And(b, hn::Set(d8, 0x80));
    const VU8 mag = hn::And(hn::BitCast(d8, hn::ShiftRight<1>(hn::BitCast(d16, b))), hn::Set(d8, 0x3F));
    const VU8 nan = hn::And(hn::VecFromMask(d8, hn::Eq(hn::And(b, hn::Set(d8, 0x7F)), hn::Set(d8, 0x7F))),
                            hn::Set(d8, 0x40));
    const VU8 hi = hn::Or(hn::Or(sign, mag), nan);
    const VU8 lo = hn::And(hn::BitCast(d8, hn::ShiftLeft<7>(hn::BitCast(d16, b))), hn::Set(d8, 0x80));
    return Raw(hn::ZipLower(d16, lo, hi), hn::ZipUpper(d16, lo, hi));
  }
  template <int k>
  static HWY_INLINE void part(const Raw& r, VF* w) {
    const hn::Half<DU16> dh16;
    const hn::Rebind<hwy::float16_t, DF> df16;
    const auto h = k == 0 ? r.h0 : r.h1;
    w[0] = hn::PromoteTo(DF(), hn::BitCast(df16, hn::LowerHalf(dh16, h)));
    w[1] = hn::PromoteTo(DF(), hn::BitCast(df16, hn::UpperHalf(dh16, h)));
  }
  // Unscaled (the column-order probe): e4m3 * 2^-8.
  static HWY_INLINE void step(const uint8_t* row, int64_t s, VF* w) {
    const Raw r = load(row, s);
    part<0>(r, w);
    part<1>(r, w + 2);
  }
  using Sc = VF;  // the step's block scale (x 2^8) in every lane
  static HWY_INLINE Sc scale_of(const RowScales& rs, int64_t, int64_t unit) { return hn::Set(DF(), rs.scales[unit]); }
  template <int k>
  static HWY_INLINE void part_scaled(const Raw& r, Sc sc, VF* w) {
    part<k>(r, w);
    w[0] = hn::Mul(w[0], sc);
    w[1] = hn::Mul(w[1], sc);
  }

  static bool handles(const QMatrix& W) { return W.block > 0 && W.block % S == 0; }
  static int64_t scale_steps(const QMatrix& W) { return W.block / S; }
  // The zips shuffle columns: the order is read off the decoder itself from a
  // probe row whose decoded values name the column.
  static const int16_t* perm() {
    static const std::vector<int16_t> p = [] {
      std::vector<uint8_t> row(static_cast<size_t>(S));
      for (int64_t c = 0; c < S; ++c) row[size_t(c)] = uint8_t(c);  // codes 0..63 decode to distinct values
      VF w[V];
      step(row.data(), 0, w);
      std::vector<float> lanes(static_cast<size_t>(S));
      for (int64_t v = 0; v < V; ++v) hn::StoreU(w[v], DF(), lanes.data() + v * kN);
      std::vector<int16_t> perm(size_t(S), -1);
      for (int64_t q = 0; q < S; ++q)
        for (int64_t c = 0; c < S; ++c)
          if (fp8_e4m3_to_f32(uint8_t(c)) * (1.0f / 256.0f) == lanes[size_t(q)]) perm[size_t(q)] = int16_t(c);
      check_perm(perm, "fp8");
      return perm;
    }();
    return p.data();
  }
  // The block scales of row r (x 2^8); false when a decoded weight could overflow.
  static void row_scales(const QMatrix& W, int64_t r, int64_t full, float* out, RowScales& rs) {
    const int64_t blocks = (full + W.block - 1) / W.block;
    const float* s = static_cast<const float*>(W.scale) + ((W.row0 + r) / W.block) * W.scale_stride;
    bool ok = true;
    for (int64_t k = 0; k < blocks; ++k) {
      ok &= std::abs(s[k]) * 448.0f <= kFltMax;
      out[k] = s[k] * 256.0f;
    }
    rs.simd_ok = ok;
    rs.scales = out;
  }
};

#endif  // SLUICE_KERNELS_DISPATCHED
}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#endif  // toggle
