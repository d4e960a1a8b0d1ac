// What the SIMD kernels (kernels/matmul_simd.cpp) ask of a weight format's
// codec, and what codecs share. Compiled once per Highway target (the toggle
// guard of Highway's -inl headers); only the ISAs the engine dispatches to get
// anything (SLUICE_KERNELS_DISPATCHED).
//
// A codec (struct <Codec>Codec in kernels::HWY_NAMESPACE, deriving from
// Codec<codecs::<Codec>>, its definition) has:
//   S, V        columns per step (one vector of packed weights) and the f32
//               vectors a step decodes into, in an order fixed per format and ISA
//   kStepBytes  packed bytes of a step
//   kScaled     false: step(row, s, w) writes a step's V vectors (int8: its raw
//               codes). true: load(row, s) -> Raw, scale_of(row scales, s, unit)
//               -> Sc, and part_scaled<k>(raw, sc, w) for k < kParts, each
//               writing V / kParts vectors of exactly scaled weights (the
//               definition's values); step_scaled() runs the parts in order
//   a default constructor (the decoder's constants, e.g. its tables)
// and, where it differs from Codec<>'s defaults:
//   kRowScale          each row's sum is multiplied by RowScales::final_scale (int8)
//   handles(W)         whether this ISA may take W at all (block, group sizes)
//   perm()             the column each position of a step holds (null: in order)
//   row_scales(W, r, full, out, rs)  row r's scale plan over its `full` columns
//                      of whole steps (block scales into `out`); rs.simd_ok
//                      false sends the row to the definition
//   scale_row_bytes(W) bytes of one row's scales, for the software prefetch
//   scale_steps(W)     steps per scale unit (scale_of's `unit`)
//   tail(W, r, c)      a column past the whole steps, in accumulator units
// and, in kernels/matmul_simd.cpp's matvec and many-token loops (the canonical
// order; defaults in brackets):
//   kAccs              accumulators per output [1]: vector j of a step goes to
//                      accumulator j / (V / kAccs)
//   kRowByRow          a register tile decodes and uses one row's step at a
//                      time [false: part by part over its rows]
//   kMatvecRows        rows per matvec register tile [4]
//   kDirectTokens      products of up to this many tokens run register tiles
//                      straight from the weights, not from decoded panels [3]
//   part_exact<k>      as part_scaled, with the definition's zero signs where
//                      part_scaled may give +0 for -0 (the transposed product
//                      adds decoded weights themselves) [part_scaled]
#if defined(SLUICE_KERNELS_CODECS_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SLUICE_KERNELS_CODECS_SIMD_INL_H_
#undef SLUICE_KERNELS_CODECS_SIMD_INL_H_
#else
#define SLUICE_KERNELS_CODECS_SIMD_INL_H_
#endif

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <hwy/highway.h>

#include "kernels/qmatrix.h"

// The ISAs the engine dispatches to (Highway also compiles its portable
// baseline, which is never selected: the scalar reference is).
#ifndef SLUICE_KERNELS_DISPATCHED
#define SLUICE_KERNELS_DISPATCHED (HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_NEON)
#endif

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {
#if SLUICE_KERNELS_DISPATCHED

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using DU8 = hn::Repartition<uint8_t, DF>;
using DU16 = hn::Repartition<uint16_t, DF>;
using DU32 = hn::RebindToUnsigned<DF>;
using DI32 = hn::RebindToSigned<DF>;
using VF = hn::Vec<DF>;
using VU8 = hn::Vec<DU8>;
constexpr int64_t kN = int64_t(hn::MaxLanes(DF()));
constexpr int64_t kBlocks = kN / 4;  // 128-bit blocks per vector
constexpr float kFltMax = std::numeric_limits<float>::max();

// What a row needs besides its codes: block scales and whether the SIMD
// order may be used for it at all.
struct RowScales {
  bool simd_ok = true;
  float final_scale = 1.0f;  // int8 rows
  const float* scales = nullptr;  // nibble: one per 32-column segment; fp8: one per block (x 2^8)
  const void* aux = nullptr;  // a decoder's own (mxfp4 on AVX2: the row's scale bytes)
};

// A scaled codec's step, part by part in order.
template <class Fmt, int k = 0>
HWY_INLINE void step_scaled_parts(const Fmt& dec, const typename Fmt::Raw& raw, const typename Fmt::Sc& sc, VF* w) {
  dec.template part_scaled<k>(raw, sc, w + k * (Fmt::V / Fmt::kParts));
  if constexpr (k + 1 < Fmt::kParts) step_scaled_parts<Fmt, k + 1>(dec, raw, sc, w);
}
template <class Fmt>
HWY_INLINE void step_scaled(const Fmt& dec, const uint8_t* row, int64_t s, const typename Fmt::Sc& sc, VF* w) {
  step_scaled_parts(dec, dec.load(row, s), sc, w);
}

// A scaled codec's step with the definition's bits, zero signs included, for
// the products that add decoded weights themselves (kernels/matmul_simd.cpp's
// transposed product): codecs whose part_scaled may give +0 where the
// definition gives -0 (a difference no w*x accumulator can see) have
// part_exact<k>; the others' part_scaled is exact already.
template <class Fmt, int k = 0>
HWY_INLINE void step_exact_parts(const Fmt& dec, const typename Fmt::Raw& raw, const typename Fmt::Sc& sc, VF* w) {
  if constexpr (requires { dec.template part_exact<k>(raw, sc, w); })
    dec.template part_exact<k>(raw, sc, w + k * (Fmt::V / Fmt::kParts));
  else
    dec.template part_scaled<k>(raw, sc, w + k * (Fmt::V / Fmt::kParts));
  if constexpr (k + 1 < Fmt::kParts) step_exact_parts<Fmt, k + 1>(dec, raw, sc, w);
}
template <class Fmt>
HWY_INLINE void step_exact(const Fmt& dec, const uint8_t* row, int64_t s, const typename Fmt::Sc& sc, VF* w) {
  step_exact_parts(dec, dec.load(row, s), sc, w);
}

// Lane l of every vector lies in 32-column segment l / 4 of the step (one per
// 128-bit block): the segment scales of a step, one per lane.
HWY_INLINE VF lane_segment_scales(const float* seg) {
#if HWY_TARGET == HWY_AVX2
  // Two broadcast loads and a blend: no shuffle-port operation (vpermps costs
  // about as much as a multiply beside the FMAs on Zen 3).
  return VF{_mm256_castsi256_ps(_mm256_blend_epi32(_mm256_castps_si256(_mm256_broadcast_ss(seg)),
                                                   _mm256_castps_si256(_mm256_broadcast_ss(seg + 1)), 0xF0))};
#else
  alignas(64) static constexpr int32_t kIdx[16] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
  return hn::TableLookupLanes(hn::LoadU(DF(), seg), hn::SetTableIndices(DF(), kIdx));
#endif
}

// bf16 patterns in both u16 halves of each 32-bit lane -> two f32 vectors: the
// even (low) halves by a shift, the odd (high) ones by a mask (one
// shuffle-port op fewer than a zip each).
HWY_INLINE void bf16_halves_to_f32(hn::Vec<DU32> p, VF* w) {
  w[0] = hn::BitCast(DF(), hn::ShiftLeft<16>(p));
  w[1] = hn::BitCast(DF(), hn::And(p, hn::Set(DU32(), 0xFFFF0000u)));
}

// A decode order read off a probe must name every column of the step once.
inline void check_perm(const std::vector<int16_t>& perm, const char* what) {
  std::vector<bool> seen(perm.size(), false);
  for (int16_t c : perm) {
    if (c < 0 || size_t(c) >= perm.size() || seen[size_t(c)])
      throw std::logic_error(std::string(what) + ": decode order is not a permutation");
    seen[size_t(c)] = true;
  }
}

// The defaults of a codec over the definition Def (see the file comment).
template <class Def>
struct Codec : Def {
  static constexpr bool kRowScale = false;
  static bool handles(const QMatrix&) { return true; }
  static const int16_t* perm() { return nullptr; }
  static void row_scales(const QMatrix&, int64_t, int64_t, float*, RowScales&) {}
  static int64_t scale_row_bytes(const QMatrix&) { return 0; }
  static int64_t scale_steps(const QMatrix&) { return 1; }
  static float tail(const QMatrix& W, int64_t r, int64_t c) { return Def::decode(W, r, c); }
};

#endif  // SLUICE_KERNELS_DISPATCHED
}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#endif  // toggle
