// The SIMD decoders of 4-bit codes (low nibble = even column): NibbleDecoder,
// which both 4-bit formats share on AVX-512 and NEON, each with its own value
// table (kernels/codecs/int4_group.h, kernels/codecs/mxfp4.h), and on AVX2 one
// decoder per format (Int4Avx2Decoder, Mxfp4Avx2Decoder). A step is 8
// vectors, each decoded value times the scale of its 32-column segment. Every
// value of both formats is an f32 whose low 16 bits are zero (a bf16), so
// tables of its bytes build the exact f32 without any conversion; the scaled
// value is exact too ((u - 8) * bf16 scale and e2m1 * 2^k are exact in f32),
// so scaling the table (AVX-512, mxfp4 on AVX2) or the decoded vector (NEON)
// gives the same value. Compiled once per Highway target.
#if defined(SLUICE_KERNELS_CODECS_NIBBLE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SLUICE_KERNELS_CODECS_NIBBLE_INL_H_
#undef SLUICE_KERNELS_CODECS_NIBBLE_INL_H_
#else
#define SLUICE_KERNELS_CODECS_NIBBLE_INL_H_
#endif

#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/codecs/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {
#if SLUICE_KERNELS_DISPATCHED

struct NibbleTables {
  alignas(16) uint8_t top[16], mid[16];
  alignas(64) float f32[16];  // value of code u
};
inline NibbleTables nibble_tables(const float (&values)[16]) {
  NibbleTables t{};
  for (int u = 0; u < 16; ++u) {
    uint32_t bits;
    std::memcpy(&bits, &values[u], 4);
    if (bits & 0xffffu) throw std::logic_error("4-bit value table needs 16 more mantissa bits");
    t.top[u] = uint8_t(bits >> 24);
    t.mid[u] = uint8_t(bits >> 16);
    t.f32[u] = values[u];
  }
  return t;
}

#if HWY_TARGET == HWY_AVX3
// AVX-512: a vector is the 16 even or the 16 odd columns of one 32-column
// segment, so one 16-entry f32 table, the 16 values times the segment's scale
// (exact: see the file comment), gives the scaled weights with one lookup.
// vpermps reads only the low 4 bits of each index lane, so the zero-extended
// code bytes index the low nibbles as they are and the high ones after a shift
// (Highway's TableLookupLanes wants indices in range, which costs a mask per
// vector: the intrinsic is used directly). Per 32 values: one widening load,
// one shift, one multiply for the table and two lookups, against five vector
// operations and two multiplies decoding then scaling.
struct NibbleDecoder {
  static constexpr int64_t S = 8 * kN, V = 8, kStepBytes = S / 2;
  static constexpr bool kScaled = true;
  using Raw = const uint8_t*;  // the step's 64 code bytes
  using Sc = const float*;     // the step's 4 segment scales
  static constexpr int kParts = 4;  // part k: segment k -> vectors 2k (even columns), 2k + 1 (odd)
  static constexpr int64_t segment_of(int64_t p) { return p / (2 * kN); }  // position p of a step
  VF values;
  explicit NibbleDecoder(const NibbleTables& t) : values(hn::Load(DF(), t.f32)) {}
  HWY_INLINE Raw load(const uint8_t* row, int64_t s) const { return row + s * (S / 2); }
  HWY_INLINE Sc scale_of(const RowScales& rs, int64_t s, int64_t) const { return rs.scales + s * 4; }
  template <int k>
  HWY_INLINE void part_scaled(Raw p, Sc sc, VF* w) const {
    const hn::Rebind<uint8_t, DF> d8;
    const hn::Vec<DU32> u = hn::PromoteTo(DU32(), hn::LoadU(d8, p + 16 * k));
    const VF tab = hn::Mul(values, hn::Set(DF(), sc[k]));
    w[0] = VF{_mm512_permutexvar_ps(u.raw, tab.raw)};
    w[1] = VF{_mm512_permutexvar_ps(hn::ShiftRight<4>(u).raw, tab.raw)};
  }
};
#else
// Part k of a step (parts 0, 1: the low nibbles, zip lower and upper; 2, 3: the
// high ones) looked up in the byte tables `top` and `mid` (the top and second
// byte of each value, per 128-bit block): the values' bf16 patterns, widened.
template <int k>
HWY_INLINE void lookup_part(VU8 b, VU8 top, VU8 mid, VF* w) {
  const DU8 d8;
  const DU16 d16;
  const VU8 nib = k < 2 ? hn::And(b, hn::Set(d8, 0x0F))
                        : hn::And(hn::BitCast(d8, hn::ShiftRight<4>(hn::BitCast(d16, b))), hn::Set(d8, 0x0F));
  const VU8 t = hn::TableLookupBytes(top, nib);
  const VU8 m = hn::TableLookupBytes(mid, nib);
  // bf16 patterns of the values (mid byte low).
  bf16_halves_to_f32(hn::BitCast(DU32(), k % 2 == 0 ? hn::ZipLower(d16, m, t) : hn::ZipUpper(d16, m, t)), w);
}
// Two byte tables (the top and second byte of each value) and two zips build
// the exact f32 without any conversion.
struct NibbleDecoder {
  static constexpr int64_t S = 8 * kN, V = 8, kStepBytes = S / 2;
  static constexpr bool kScaled = true;
  using Raw = VU8;
  using Sc = VF;  // the step's segment scales, one per lane (lane_segment_scales)
  static constexpr int kParts = 4;  // parts 0, 1: low nibbles (zip lower, upper); 2, 3: high nibbles
  static constexpr int64_t segment_of(int64_t p) { return (p % kN) / 4; }  // position p of a step
  VU8 top, mid;
  explicit NibbleDecoder(const NibbleTables& t)
      : top(hn::LoadDup128(DU8(), t.top)), mid(hn::LoadDup128(DU8(), t.mid)) {}
  HWY_INLINE Raw load(const uint8_t* row, int64_t s) const { return hn::LoadU(DU8(), row + s * (S / 2)); }
  template <int k>
  HWY_INLINE void part(Raw b, VF* w) const { lookup_part<k>(b, top, mid, w); }
  HWY_INLINE Sc scale_of(const RowScales& rs, int64_t s, int64_t) const {
    return lane_segment_scales(rs.scales + s * kBlocks);
  }
  template <int k>
  HWY_INLINE void part_scaled(Raw b, Sc sc, VF* w) const {
    part<k>(b, w);
    w[0] = hn::Mul(w[0], sc);
    w[1] = hn::Mul(w[1], sc);
  }
};
#endif

#if HWY_TARGET == HWY_AVX2
// int4 on AVX2, without shuffles: lane j of the step's 32 bytes, read as eight
// u32 lanes, holds the codes of columns 8j..8j+7 (nibble n = column 8j + n),
// and vector n of the step is nibble n of every lane. A nibble u at mantissa
// bits b..b+3 of an f32 whose exponent makes those bits units (an OR sets the
// exponent field, an AND with a mask holding the nibble's bits and the
// exponent clears the rest) is the exact f32 M_b + u, M_b = 2^(23-b); one FMA
// with the segment scale s then gives the scaled weight:
//   (M_b + u) * s + c_b, c_b = -(M_b + 8) * s,
// whose exact value is (u - 8) * s, rounded once like the definition's
// (u - 8) * s. c_b is exact in f32: M_b + 8 = 8 * (2^(20-b) + 1) has at most
// 13 significant bits for b = 8, 12, s at most 8 (a bf16), and its lowest bit
// is at least 8 times s's (>= 2^-130); rows with |s| > FLT_MAX / 2^16 take the
// definition (kMaxScale), so c_b is finite. Nibbles 2k and 2k + 1 come from
// the lanes shifted so that they sit at b = 8 and 12 (left by 8, none, right
// by 8, right by 16): per step three shifts, four ORs, eight ANDs, and two
// FMA-port operations per weight vector (this FMA and the product's). Its
// zeros are +0 where the definition may give -0 (u = 8, or s = -0): an
// accumulator of w*x started at +0 cannot tell them apart, and part_exact (a
// subtract and a multiply) gives the definition's bits for the products that
// add weights themselves.
struct Int4Avx2Decoder {
  static constexpr int64_t S = 8 * kN, V = 8, kStepBytes = S / 2;
  static constexpr bool kScaled = true;
  // Each row's step is decoded and used whole before the next row's
  // (kernels/matmul_simd.cpp's run_steps), so a tile keeps one row's scale
  // vectors in registers at a time.
  static constexpr bool kRowByRow = true;
  // Two accumulators per output (even and odd vectors of the step): a row's
  // eight dependent FMAs per step were the longest chain of the matvec.
  static constexpr int kAccs = 2;
  // Three rows per matvec tile: six accumulators, the constants and one row's
  // decode fit the 16 registers (four rows spilled accumulators every step).
  static constexpr int kMatvecRows = 3;
  static constexpr float kMaxScale = kFltMax / 65536.0f;
  using Raw = hn::Vec<DU32>;
  struct Sc {
    VF s, c8, c12;  // the segment scale of each lane, and c_b for b = 8, 12
  };
  static constexpr int kParts = 4;  // part k: nibbles 2k (b = 8), 2k + 1 (b = 12)
  static constexpr int64_t segment_of(int64_t p) { return (p % kN) / 4; }  // position p of a step
  explicit Int4Avx2Decoder(const NibbleTables&) {}
  HWY_INLINE Raw load(const uint8_t* row, int64_t s) const {
    return hn::BitCast(DU32(), hn::LoadU(DU8(), row + s * (S / 2)));
  }
  static constexpr float magic(int b) { return float(1 << (23 - b)); }
  HWY_INLINE Sc scale_of(const RowScales& rs, int64_t s, int64_t) const {
    const DF df;
    const VF v = lane_segment_scales(rs.scales + s * kBlocks);
    return {v, hn::Mul(v, hn::Set(df, -(magic(8) + 8.0f))), hn::Mul(v, hn::Set(df, -(magic(12) + 8.0f)))};
  }
  // Nibbles 2k, 2k + 1 as the f32s M_8 + u and M_12 + u.
  template <int k>
  HWY_INLINE void biased(Raw b, VF* v) const {
    const DU32 du;
    Raw src = k == 0 ? hn::ShiftLeft<8>(b) : k == 1 ? b : k == 2 ? hn::ShiftRight<8>(b) : hn::ShiftRight<16>(b);
    src = hn::Or(src, hn::Set(du, 0x7F800000u));
    // One OR per source: g++ would otherwise fold it into both ANDs (an AND and
    // an OR per vector).
    asm("" : "+x"(src.raw));
    v[0] = hn::BitCast(DF(), hn::And(src, hn::Set(du, (0xFu << 8) | (142u << 23))));
    v[1] = hn::BitCast(DF(), hn::And(src, hn::Set(du, (0xFu << 12) | (138u << 23))));
  }
  template <int k>
  HWY_INLINE void part_scaled(Raw b, const Sc& sc, VF* w) const {
    VF v[2];
    biased<k>(b, v);
    w[0] = hn::MulAdd(v[0], sc.s, sc.c8);
    w[1] = hn::MulAdd(v[1], sc.s, sc.c12);
  }
  // The definition's bits: (M_b + u) - (M_b + 8) = u - 8 exactly, then one multiply.
  template <int k>
  HWY_INLINE void part_exact(Raw b, const Sc& sc, VF* w) const {
    const DF df;
    VF v[2];
    biased<k>(b, v);
    w[0] = hn::Mul(hn::Sub(v[0], hn::Set(df, magic(8) + 8.0f)), sc.s);
    w[1] = hn::Mul(hn::Sub(v[1], hn::Set(df, magic(12) + 8.0f)), sc.s);
  }
};
#endif

#if HWY_TARGET == HWY_AVX2
// mxfp4 on AVX2: NibbleDecoder's lookups and zips, from tables that already
// hold the scaled values. A scaled value e2m1 * 2^(e-127) has at most two
// significant bits, so it is a bf16 for every scale byte e (subnormal,
// overflowing to inf and NaN included): the top and second bytes of
// kFp4Values[u] * e8m0_to_f32(e), the definition's own product, for each of
// the 256 bytes e (8 KiB, built once), are exact tables. A step's two
// segments take their scale byte's tables into the two 128-bit halves (a
// load and an insert each), so a decoded vector costs no multiply at all:
// the FMA ports only add w*x. The column order is NibbleDecoder's
// (nibble_perm).
struct Mxfp4Avx2Decoder {
  static constexpr int64_t S = 8 * kN, V = 8, kStepBytes = S / 2;
  static constexpr bool kScaled = true;
  static constexpr bool kRowByRow = true;
  static constexpr int kAccs = 2;  // as Int4Avx2Decoder
  static constexpr int kMatvecRows = 3;
  using Raw = VU8;
  struct Sc {
    VU8 top, mid;  // byte tables of the scaled values, segment h in 128-bit half h
  };
  static constexpr int kParts = 4;
  static constexpr int64_t segment_of(int64_t p) { return NibbleDecoder::segment_of(p); }
  struct Tables {
    alignas(32) uint8_t rec[256][32];  // scale byte e: 16 top bytes, then 16 second bytes
  };
  static const Tables& tables() {
    static const Tables t = [] {
      Tables r{};
      for (int e = 0; e < 256; ++e)
        for (int u = 0; u < 16; ++u) {
          const float f = kFp4Values[u] * e8m0_to_f32(uint8_t(e));
          uint32_t bits;
          std::memcpy(&bits, &f, 4);
          if (bits & 0xffffu) throw std::logic_error("mxfp4: a scaled value is not a bf16");
          r.rec[e][u] = uint8_t(bits >> 24);
          r.rec[e][16 + u] = uint8_t(bits >> 16);
        }
      return r;
    }();
    return t;
  }
  NibbleDecoder unscaled;  // the column-order probe's
  const Tables* tabs;
  explicit Mxfp4Avx2Decoder(const float (&values)[16]) : unscaled(nibble_tables(values)), tabs(&tables()) {}
  HWY_INLINE Raw load(const uint8_t* row, int64_t s) const { return unscaled.load(row, s); }
  // rs.aux: the row's scale bytes.
  HWY_INLINE Sc scale_of(const RowScales& rs, int64_t s, int64_t) const {
    const uint8_t* e = static_cast<const uint8_t*>(rs.aux) + s * kBlocks;
    const uint8_t* r0 = tabs->rec[e[0]];
    const uint8_t* r1 = tabs->rec[e[1]];
    const auto lo = [](const uint8_t* p) { return _mm_load_si128(reinterpret_cast<const __m128i*>(p)); };
    return {VU8{_mm256_inserti128_si256(_mm256_castsi128_si256(lo(r0)), lo(r1), 1)},
            VU8{_mm256_inserti128_si256(_mm256_castsi128_si256(lo(r0 + 16)), lo(r1 + 16), 1)}};
  }
  template <int k>
  HWY_INLINE void part_scaled(Raw b, const Sc& sc, VF* w) const { lookup_part<k>(b, sc.top, sc.mid, w); }
};
#endif

// The decode order of a step of a 4-bit decoder (NibbleDecoder: both formats,
// one decoder, two tables; Int4Avx2Decoder). It is read off the decoder from
// probe rows whose values, those of int4 (u - 8), name the column (low digit,
// then high digit).
template <class Dec>
inline std::vector<int16_t> probe_nibble_perm() {
  float probe_values[16];
  for (int u = 0; u < 16; ++u) probe_values[u] = float(u - 8);
  const Dec dec(nibble_tables(probe_values));
  constexpr int64_t S = Dec::S;
  std::vector<int16_t> p(size_t(S), 0);
  for (int digit = 0; digit < 2; ++digit) {  // column = low digit + 16 * high digit, read back as u - 8
    std::vector<uint8_t> row(size_t(S / 2), 0);
    for (int64_t c = 0; c < S; ++c) row[size_t(c / 2)] |= uint8_t(((c >> (4 * digit)) & 15) << ((c & 1) * 4));
    VF w[Dec::V];
    const std::vector<float> unit_scales(size_t(S / 32 + kN), 1.0f);
    RowScales rs;
    rs.scales = unit_scales.data();
    step_scaled(dec, row.data(), 0, dec.scale_of(rs, 0, 0), w);
    std::vector<float> lanes(static_cast<size_t>(S));
    for (int64_t v = 0; v < Dec::V; ++v) hn::StoreU(w[v], DF(), lanes.data() + v * kN);
    for (int64_t q = 0; q < S; ++q) p[size_t(q)] = int16_t(p[size_t(q)] + (int(lanes[size_t(q)]) + 8) * (digit ? 16 : 1));
  }
  // Each position's scale is that of the segment the decoder says it lies in.
  for (int64_t q = 0; q < S; ++q)
    if (p[size_t(q)] / 32 != Dec::segment_of(q))
      throw std::logic_error("nibble decode: lane outside its segment");
  check_perm(p, "nibble");
  return p;
}
inline const int16_t* nibble_perm() {
  static const std::vector<int16_t> perm = probe_nibble_perm<NibbleDecoder>();
  return perm.data();
}

// The segment scales end with kN zeros (room the scale plan leaves for them).
inline void pad_segment_scales(float* out, int64_t segments) {
  for (int64_t i = segments; i < segments + kN; ++i) out[i] = 0.0f;
}

#endif  // SLUICE_KERNELS_DISPATCHED
}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#endif  // toggle
