// The SIMD matrix products for every weight format, written once with Highway
// and compiled for each instruction set (foreach_target); kernels/isa.cpp picks
// one at run time. The kernels are templates over a format's codec (its SIMD
// decoder: kernels/codecs/, one file per format), instantiated for every row of
// kernels/weight_formats.def; each codec's definition (its decode) stays the
// reference.
//
// Canonical summation order, per ISA (a batch of tokens gives the same bits as
// one token at a time, whatever the row split between threads or the kernel
// variant, because every output follows exactly this sequence):
//  - a row is read in steps of S columns (one vector of packed weights) that
//    decode exactly into S/N f32 vectors in an order fixed per format and ISA;
//    prepare_x permutes the activations into that order once.
//  - formats with block scales (int4, mxfp4, fp8) decode the scaled weight, the
//    value the scalar definition decodes, bit for bit (int4 on AVX2: up to the
//    sign of a zero, which no accumulator of w*x started at +0 can see; the
//    transposed product decodes it with the definition's sign). int4 and mxfp4:
//    every decoded value takes the scale of its 32-column segment ((u - 8) *
//    bf16 scale and e2m1 * 2^k are exact in f32, so multiplying the value
//    table (AVX-512) or the decoded vector (NEON) gives the same value; on
//    AVX2, int4 forms it with one FMA from an exactly biased value and mxfp4
//    looks it up in byte tables of the scaled values: kernels/codecs/
//    nibble-inl.h); fp8: the step's 128-column block scale, carrying the 2^8
//    of the f16 trick (kernels/codecs/fp8_e4m3_block.h), so (e4m3 * 2^-8) *
//    (scale * 2^8) rounds once, like the definition. The many-token product
//    does this once per weight when it decodes a panel.
//  - each output (row, token) has A accumulator vectors (a codec's kAccs: 2
//    for int4 and mxfp4 on AVX2, 1 otherwise); decoded vector j of a step
//    adds w*x to accumulator j / (V / A) (the step's first V / A vectors to
//    the first, ...; one FMA each), step after step, and the accumulators are
//    added in order before the tail; int8's row scale multiplies the final
//    sum.
//  - columns past the last whole step are decoded by the scalar definition and
//    added last; SumOfLanes gives the output.
// Rows whose scales could make a decoded weight overflow (or are not finite) are
// computed by the scalar definition instead, so inf/NaN follow the reference.
#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "util/numeric.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

// Every format's codec (kernels/weight_formats.def), with its SIMD decoder for this target.
#define SLUICE_SIMD_CODECS 1
#include "kernels/codecs/all.h"

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {

// Only the ISAs the engine dispatches to are built (kernels/codecs/simd-inl.h).
#if SLUICE_KERNELS_DISPATCHED

// Register-blocked tile of the multi-token product (rows x tokens): R weight
// vectors, one activation vector and R * T accumulators in registers.
#if HWY_TARGET == HWY_AVX2
constexpr int kVecRegs = 16;
#else
constexpr int kVecRegs = 32;
#endif
// Tokens per register tile of the many-token product (tile_tokens<Fmt>()).
constexpr int kTileTokens = 4;

// ------------------------------------------------------------ column layout
// Position p of a step holds column perm[p] of that step.
struct Layout {
  int64_t S = 0;       // columns per step
  int64_t steps = 0;   // whole steps per row
  int64_t full = 0;    // steps * S
  int64_t padded = 0;  // full + tail rounded up to kN
  const int16_t* perm = nullptr;
  bool natural = false;  // perm is the identity
};

template <int64_t S>
const int16_t* identity_perm() {
  static const std::vector<int16_t> p = [] {
    std::vector<int16_t> v(static_cast<size_t>(S));
    for (int64_t i = 0; i < S; ++i) v[size_t(i)] = int16_t(i);
    return v;
  }();
  return p.data();
}

template <class Fmt>
inline Layout layout_of(const QMatrix& W) {
  Layout L;
  L.S = Fmt::S;
  L.steps = W.cols / L.S;
  L.full = L.steps * L.S;
  L.padded = L.full + (W.cols - L.full + kN - 1) / kN * kN;
  L.perm = Fmt::perm();
  L.natural = L.perm == nullptr;
  if (L.natural) L.perm = identity_perm<Fmt::S>();
  return L;
}

// ------------------------------------------------------------- entry points

bool Handles(const QMatrix& W) {
  switch (W.fmt) {
#define SLUICE_WEIGHT_FORMAT(id, name, codec) \
  case WeightFormat::id: return codec##Codec::handles(W);
#include "kernels/weight_formats.def"
  }
  return false;
}

// The layout of W's format.
inline Layout layout_for(const QMatrix& W) {
  switch (W.fmt) {
#define SLUICE_WEIGHT_FORMAT(id, name, codec) \
  case WeightFormat::id: return layout_of<codec##Codec>(W);
#include "kernels/weight_formats.def"
  }
  return Layout{};
}

int64_t PaddedCols(const QMatrix& W) { return layout_for(W).padded; }

void PrepareX(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* XP) {
  const Layout L = layout_for(W);
  for (int64_t t = 0; t < n; ++t) {
    const float* x = X + t * ldx;
    float* xp = XP + t * L.padded;
    if (L.natural) {
      std::copy(x, x + W.cols, xp);
    } else {
      for (int64_t s = 0; s < L.steps; ++s)
        for (int64_t p = 0; p < L.S; ++p) xp[s * L.S + p] = x[s * L.S + L.perm[p]];
      std::copy(x + L.full, x + W.cols, xp + L.full);
    }
    std::fill(xp + W.cols, xp + L.padded, 0.0f);
  }
}

// The reference definition for one row, reading activations through the layout.
void row_by_definition(const QMatrix& W, const Layout& L, int64_t r, const float* XP, int64_t n, float* Y, int64_t ldy) {
  std::vector<int64_t> pos(static_cast<size_t>(W.cols));
  for (int64_t s = 0; s < L.steps; ++s)
    for (int64_t p = 0; p < L.S; ++p) pos[size_t(s * L.S + L.perm[p])] = s * L.S + p;
  for (int64_t c = L.full; c < W.cols; ++c) pos[size_t(c)] = c;
  std::vector<float> row(static_cast<size_t>(W.cols));
  decode_row_ref(W, r, row.data());
  for (int64_t t = 0; t < n; ++t) {
    const float* xp = XP + t * L.padded;
    float acc = 0.0f;
    for (int64_t c = 0; c < W.cols; ++c) acc += row[size_t(c)] * xp[pos[size_t(c)]];
    Y[t * ldy + r] = acc;
  }
}

// Columns past the whole steps in accumulator units (int8: raw codes).
template <class Fmt>
inline void tail_values(const QMatrix& W, const Layout& L, int64_t r, float* out) {
  const int64_t n = L.padded - L.full;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = L.full + i;
    out[i] = c < W.cols ? Fmt::tail(W, r, c) : 0.0f;
  }
}

// Per-thread scratch, grown on demand.
struct Scratch {
  std::vector<float> scales, tails, wbuf, accbuf;
  static Scratch& get() {
    thread_local Scratch s;
    return s;
  }
  static float* grow(std::vector<float>& v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  }
};

// Prepares per-row scales for rows [r, r + R) into `buf` (R slots of `slot` floats).
template <class Fmt>
inline void row_scales(const QMatrix& W, const Layout& L, int64_t r, int R, float* buf, int64_t slot, RowScales* rs) {
  for (int i = 0; i < R; ++i) {
    rs[i] = RowScales{};
    Fmt::row_scales(W, r + i, L.full, buf + i * slot, rs[i]);
  }
}

inline int64_t scale_slot(const QMatrix& W, const Layout& L) { return L.full / 32 + W.cols / 16 + 2 * kN + 4; }

// Keeps a loaded vector in a register: g++ otherwise folds the load into
// every FMA that uses it, doubling the loads of a register tile.
HWY_INLINE VF pinned(VF v) {
#if HWY_TARGET == HWY_AVX2
  asm("" : "+x"(v.raw));
#elif HWY_TARGET == HWY_AVX3
  asm("" : "+v"(v.raw));
#elif HWY_TARGET == HWY_NEON
  asm("" : "+w"(v.raw));
#endif
  return v;
}

// Where a tile's decoded steps come from: straight from the packed weights, or
// from a panel decoded earlier into an L1 buffer. Both give the same vectors.
template <class Fmt, int R>
struct DirectSrc {
  const Fmt& dec;
  const uint8_t* rows[R];
  // The same step of the next row group's rows (software prefetch: a row group
  // jumps to new rows, whose first pages the hardware prefetchers miss).
  const uint8_t* next[R];
  int64_t step_bytes;
  // The next group's scale rows (contiguous), a share of them per step.
  const uint8_t* next_scales;
  int64_t scale_bytes_per_step;
  HWY_INLINE void get(int i, int64_t s, VF* w) const { dec.step(rows[i], s, w); }
  HWY_INLINE void prefetch(int64_t s) const {
    for (int i = 0; i < R; ++i) __builtin_prefetch(next[i] + s * step_bytes, 0, 3);
    __builtin_prefetch(next_scales + s * scale_bytes_per_step, 0, 3);
  }
};
template <class Fmt>
struct BufferSrc {
  const float* wbuf;  // row i, step s of the block starting at s0: wbuf + i * row_floats + (s - s0) * S
  int64_t row_floats;
};

// Part k of one step of R rows x T tokens: each row's decoded vectors are
// multiplied by the row's scale vector (the exact weights, see the file
// comment), then w*x goes into the accumulator of every (row, token). The rows
// are interleaved part by part, so one activation load serves all R rows and
// their R chains of dependent FMAs overlap.
template <class Fmt, int R, int T, int A, int k>
HWY_INLINE void step_parts(const Fmt& dec, const typename Fmt::Raw* raw, const float* const* xo,
                           const typename Fmt::Sc* sc, VF (&acc)[R][T][A]) {
  constexpr int64_t Vp = Fmt::V / Fmt::kParts;
  VF w[R][Vp];
  for (int i = 0; i < R; ++i) dec.template part_scaled<k>(raw[i], sc[i], w[i]);
  for (int64_t j = 0; j < Vp; ++j) {
    const int64_t v = k * Vp + j;
    for (int t = 0; t < T; ++t) {
      const VF xv = hn::LoadU(DF(), xo[t] + v * kN);
      for (int i = 0; i < R; ++i) acc[i][t][v / (Fmt::V / A)] = hn::MulAdd(w[i][j], xv, acc[i][t][v / (Fmt::V / A)]);
    }
  }
  if constexpr (k + 1 < Fmt::kParts) step_parts<Fmt, R, T, A, k + 1>(dec, raw, xo, sc, acc);
}

// Whether a codec's steps are decoded row by row in a register tile (its
// kRowByRow; default: part by part over the tile's rows).
template <class Fmt>
constexpr bool row_by_row() {
  if constexpr (requires { Fmt::kRowByRow; }) return Fmt::kRowByRow;
  return false;
}

// Accumulators per output (its kAccs; default 1): decoded vector j of a step
// goes to accumulator j / (V / accs()), which halves each FMA chain where a
// step's decode leaves the FMA latency exposed. V is a multiple of it.
template <class Fmt>
constexpr int accs() {
  if constexpr (requires { Fmt::kAccs; }) return Fmt::kAccs;
  return 1;
}

// Rows per register tile of the matvec (a codec's kMatvecRows; default 4).
template <class Fmt>
constexpr int matvec_rows() {
  if constexpr (requires { Fmt::kMatvecRows; }) return Fmt::kMatvecRows;
  return 4;
}

// The output's accumulators added in order: ((a0 + a1) + a2) ...
template <int A>
HWY_INLINE VF combine(const VF* a) {
  VF sum = a[0];
  for (int k = 1; k < A; ++k) sum = hn::Add(sum, a[k]);
  return sum;
}

// Steps [s0, s1) of R rows x T tokens into the accumulators acc[i][t][a]
// (registers). These loops are the canonical order described at the top of
// the file.
template <class Fmt, int R, int T, int A, class Src>
HWY_INLINE void run_steps(const Src& src, const RowScales* rs, int64_t s0, int64_t s1, int64_t F,
                          const float* const* x, VF (&acc)[R][T][A]) {
  const DF df;
  static_assert(A == accs<Fmt>() && (A == 1 || (Fmt::kScaled && Fmt::V % A == 0)));
  int64_t k = 0, unit = s0 / F;
  for (int64_t s = s0; s < s1; ++s) {
    src.prefetch(s);
    if constexpr (!Fmt::kScaled) {
      VF w[R];
      for (int i = 0; i < R; ++i) src.get(i, s, &w[i]);
      for (int t = 0; t < T; ++t) {
        const VF xv = hn::LoadU(df, x[t] + s * Fmt::S);
        for (int i = 0; i < R; ++i) acc[i][t][0] = hn::MulAdd(w[i], xv, acc[i][t][0]);
      }
    } else {
      const float* xo[T];
      for (int t = 0; t < T; ++t) xo[t] = x[t] + s * Fmt::S;
      if constexpr (row_by_row<Fmt>()) {
        // One row's whole step at a time (its scale vectors in registers for
        // that row only); every output's sequence is the same.
        for (int i = 0; i < R; ++i) {
          VF w[Fmt::V];
          step_scaled_parts(src.dec, src.dec.load(src.rows[i], s), src.dec.scale_of(rs[i], s, unit), w);
          for (int t = 0; t < T; ++t) {
            // Each row reads the activations itself (an FMA's memory operand):
            // g++ would otherwise load them once per step and keep copies on
            // the stack.
            const float* xt = xo[t];
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
            asm volatile("" : "+r"(xt));
#endif
            for (int64_t v = 0; v < Fmt::V; ++v)
              acc[i][t][v / (Fmt::V / A)] =
                  hn::MulAdd(w[v], hn::LoadU(df, xt + v * kN), acc[i][t][v / (Fmt::V / A)]);
          }
        }
      } else {
        typename Fmt::Raw raw[R];
        for (int i = 0; i < R; ++i) raw[i] = src.dec.load(src.rows[i], s);
        // Scale blocks of F steps (F = 1 for the nibble formats, whose scales are
        // per lane); k counts the steps into the block (no division per step).
        typename Fmt::Sc sc[R];
        for (int i = 0; i < R; ++i) sc[i] = src.dec.scale_of(rs[i], s, unit);
        step_parts<Fmt, R, T, A, 0>(src.dec, raw, xo, sc, acc);
      }
      if (++k == F) {
        k = 0;
        ++unit;
      }
    }
  }
}

// Adds the tail vectors of one row to its accumulator and writes the output.
HWY_INLINE float finish(const Layout& L, const float* tail, const float* x, const RowScales& rs, VF acc) {
  for (int64_t c = L.full; c < L.padded; c += kN)
    acc = hn::MulAdd(hn::LoadU(DF(), tail + (c - L.full)), hn::LoadU(DF(), x + c), acc);
  return hn::GetLane(hn::SumOfLanes(DF(), acc)) * rs.final_scale;
}

// R rows x T tokens, weights decoded in registers straight from memory.
template <class Fmt, int R, int T>
HWY_NOINLINE void tile_direct(const Fmt& dec, const QMatrix& W, const Layout& L, const RowScales* rs,
                              const float* tails, int64_t r, int64_t r_end, const float* const* x, float* Y,
                              int64_t ldy) {
  DirectSrc<Fmt, R> src{dec, {}, {}, Fmt::kStepBytes, W.data + r * W.row_bytes, 0};
  for (int i = 0; i < R; ++i) {
    src.rows[i] = W.data + (r + i) * W.row_bytes;
    src.next[i] = r + R + i < r_end ? src.rows[i] + R * W.row_bytes : src.rows[i];
  }
  if (const int64_t srb = Fmt::scale_row_bytes(W); srb > 0 && r + 2 * R <= r_end && L.steps > 0) {
    src.next_scales = static_cast<const uint8_t*>(W.scale) + (W.row0 + r + R) * srb;
    src.scale_bytes_per_step = (R * srb + L.steps - 1) / L.steps;
  }
  constexpr int A = accs<Fmt>();
  VF acc[R][T][A];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t)
      for (int a = 0; a < A; ++a) acc[i][t][a] = hn::Zero(DF());
  run_steps<Fmt, R, T, A>(src, rs, 0, L.steps, Fmt::kScaled ? Fmt::scale_steps(W) : 1, x, acc);
  const int64_t tail_len = L.padded - L.full;
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) Y[t * ldy + r + i] = finish(L, tails + i * tail_len, x[t], rs[i], combine<A>(acc[i][t]));
}

// The per-output sequence of run_steps over a panel decoded (and scaled) into
// a buffer, with the loops turned so that each weight vector is loaded once per
// tile and each activation vector once per tile: the R weight vectors of a
// step in registers, then one activation vector per token feeding R
// accumulators (R + 1 + R * T registers).
template <class Fmt, int R, int T>
HWY_NOINLINE void tile_buffered(const BufferSrc<Fmt>& src, int64_t s0, int64_t s1, const float* const* xs,
                                VF* accm) {
  const DF df;
  const float* x[T];
  for (int t = 0; t < T; ++t) x[t] = xs[t] + s0 * Fmt::S;
  const float* wp = src.wbuf;
  const int64_t nv = (s1 - s0) * Fmt::V;
  if (nv <= 0) return;
  // With A accumulators per output, one pass per accumulator over the vectors
  // that go to it (vectors [a * Vp, (a + 1) * Vp) of every step).
  constexpr int A = accs<Fmt>();
  constexpr int64_t Vp = Fmt::V / A;
  for (int a = 0; a < A; ++a) {
    VF acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < T; ++t) acc[i][t] = accm[(i * T + t) * A + a];
    auto fmas = [&](int64_t v) HWY_ATTR {
      VF w[R];
      for (int i = 0; i < R; ++i) w[i] = pinned(hn::Load(df, wp + i * src.row_floats + v * kN));
      for (int t = 0; t < T; ++t) {
        const VF xv = pinned(hn::LoadU(df, x[t] + v * kN));
        for (int i = 0; i < R; ++i) acc[i][t] = hn::MulAdd(w[i], xv, acc[i][t]);
      }
    };
    // A do-while (at least one vector): with a zero-trip path g++ keeps the
    // accumulators in a stack copy at entry and exit of every call.
    if constexpr (A == 1) {
      int64_t v = 0;
      do fmas(v);
      while (++v < nv);
    } else {
      int64_t v = a * Vp;
      do {
        for (int64_t j = 0; j < Vp; ++j) fmas(v + j);
      } while ((v += Fmt::V) < nv);
    }
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < T; ++t) accm[(i * T + t) * A + a] = acc[i][t];
  }
}

// Calls f.template operator()<t>() with the template token count t = tt (1 <= tt <= T)
// chosen at run time: the register tiles take their token count as a template
// argument.
template <int T, class F>
HWY_INLINE void with_tokens(int tt, F&& f) {
  if constexpr (T > 1) {
    if (tt < T) return with_tokens<T - 1>(tt, f);
  }
  f.template operator()<T>();
}

// Rows per register tile of the many-token product: 3 x 4 (16 registers) on
// AVX2, 4 x tile_tokens() with 32 registers.
template <class Fmt>
constexpr int tile_rows() {
  return kVecRegs == 16 ? 3 : 4;
}
template <class Fmt>
constexpr int panel_rows() {
  return 8 * tile_rows<Fmt>();
}

// Many tokens: a panel of up to panel_rows() rows is decoded once per block of
// kBlockCols columns into a buffer (L2), then register tiles of R rows x
// tile_tokens() tokens run over it with their activations (T x kBlockCols floats) in L1, so each
// weight is decoded once and read from L2 once per token tile. Each output
// still sees exactly the sequence of tile_direct.
constexpr int64_t kBlockCols = 512;  // columns decoded per panel block
// AVX-512 uses 6-token tiles (24 accumulators in registers: fewer loads per
// FMA). Measured on Zen 5 (sluice bench --kernels); NEON keeps 4 (not measured
// on ARM hardware). Every output's sequence is unchanged.
template <class Fmt>
constexpr int tile_tokens() {
  return HWY_TARGET == HWY_AVX3 ? 6 : kTileTokens;
}

// Software prefetch of the packed weights a panel decodes kPrefetchBlocks
// column blocks later (of its own rows, or of the next panel's), spread over the
// register tiles of the current block: a panel reads P short row pieces at a
// time, which the hardware prefetchers do not follow, so without this every
// block's decode waits on DRAM while the FMA units idle.
struct PanelPrefetch {
  const uint8_t* row = nullptr;  // the current row's piece
  int64_t row_bytes = 0, bytes = 0, rows_left = 0, off = 0;
  int64_t total = 0;  // lines
  void set(const uint8_t* b, int64_t rb, int64_t rows, int64_t piece) {
    row = b;
    row_bytes = rb;
    bytes = piece;
    rows_left = rows;
    off = 0;
    total = rows * ((piece + 63) / 64);
  }
  HWY_INLINE void issue(int64_t count) {
    for (; count > 0 && rows_left > 0; --count) {
      __builtin_prefetch(row + off, 0, 3);
      off += 64;
      if (off >= bytes) {
        off = 0;
        row += row_bytes;
        --rows_left;
      }
    }
  }
};

// How many column blocks ahead a panel prefetches (1 left the decode waiting
// on DRAM about as often; 2 to 4 measured alike).
constexpr int64_t kPrefetchBlocks = 2;

template <class Fmt, int R>
void panel_buffered(const Fmt& dec, const QMatrix& W, const Layout& L, const RowScales* rs, const float* tails,
                    int64_t r, int P, int64_t r_end, const float* XP, int64_t n, float* Y, int64_t ldy) {
  Scratch& sc = Scratch::get();
  constexpr int TT = tile_tokens<Fmt>();
  const int64_t F = Fmt::kScaled ? Fmt::scale_steps(W) : 1;
  const int64_t per_block = std::max<int64_t>(1, kBlockCols / Fmt::S);
  const int64_t row_floats = per_block * Fmt::S;
  float* wbuf = Scratch::grow(sc.wbuf, size_t(P * row_floats + 16));
  wbuf = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(wbuf) + 63) & ~uintptr_t(63));
  const int64_t ntiles = (n + TT - 1) / TT;
  // Accumulators: row group g (R rows), token tile ti at accm + (g * ntiles + ti) * R * TT * A.
  constexpr int A = accs<Fmt>();
  static_assert(A == 1 || (Fmt::V % A == 0));
  const int64_t groups = P / R;
  const int64_t nacc = groups * ntiles * R * TT * A;
  float* accf = Scratch::grow(sc.accbuf, size_t((nacc + 1) * kN + 16));
  VF* accm = reinterpret_cast<VF*>((reinterpret_cast<uintptr_t>(accf) + 63) & ~uintptr_t(63));
  for (int64_t k = 0; k < nacc; ++k) accm[k] = hn::Zero(DF());
  const DF df;
  const int64_t sb = Fmt::kStepBytes;
  const int64_t calls = ntiles * groups;
  PanelPrefetch pf;
  const int64_t nblocks = (L.steps + per_block - 1) / per_block;
  for (int64_t s0 = 0; s0 < L.steps; s0 += per_block) {
    const int64_t s1 = std::min(L.steps, s0 + per_block);
    {
      // The block kPrefetchBlocks ahead, in this panel or the next one.
      int64_t t = s0 / per_block + kPrefetchBlocks, rr = r;
      if (t >= nblocks) {
        t -= nblocks;
        rr = r + P;
      }
      const int64_t ts0 = t * per_block, ts1 = std::min(L.steps, ts0 + per_block);
      const int64_t nr = std::min<int64_t>(P, r_end - rr);
      pf.set(W.data + rr * W.row_bytes + ts0 * sb, W.row_bytes, ts1 > ts0 ? std::max<int64_t>(0, nr) : 0,
             (ts1 - ts0) * sb);
    }
    const int64_t pf_per_call = (pf.total + calls - 1) / calls;
    for (int i = 0; i < P; ++i) {
      const uint8_t* row = W.data + (r + i) * W.row_bytes;
      float* out = wbuf + i * row_floats;
      for (int64_t s = s0; s < s1; ++s, out += Fmt::S) {
        VF w[Fmt::V];
        if constexpr (Fmt::kScaled) step_scaled(dec, row, s, dec.scale_of(rs[i], s, s / F), w);
        else dec.step(row, s, w);
        for (int64_t v = 0; v < Fmt::V; ++v) hn::Store(w[v], df, out + v * kN);
      }
    }
    for (int64_t ti = 0; ti < ntiles; ++ti) {
      const int64_t t0 = ti * TT;
      const int tt = int(std::min<int64_t>(TT, n - t0));
      const float* x[TT];
      for (int t = 0; t < tt; ++t) x[t] = XP + (t0 + t) * L.padded;
      for (int64_t g = 0; g < groups; ++g) {
        const BufferSrc<Fmt> src{wbuf + g * R * row_floats, row_floats};
        pf.issue(pf_per_call);
        VF* acc = accm + (g * ntiles + ti) * R * TT * A;
        with_tokens<TT>(tt, [&]<int T>() HWY_ATTR { tile_buffered<Fmt, R, T>(src, s0, s1, x, acc); });
      }
    }
  }
  const int64_t tail_len = L.padded - L.full;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t ti = 0; ti < ntiles; ++ti) {
      const int64_t t0 = ti * TT;
      const int tt = int(std::min<int64_t>(TT, n - t0));
      for (int i = 0; i < R; ++i)
        for (int t = 0; t < tt; ++t) {
          const int64_t row = g * R + i;
          Y[(t0 + t) * ldy + r + row] =
              finish(L, tails + row * tail_len, XP + (t0 + t) * L.padded, rs[row],
                     combine<A>(accm + (g * ntiles + ti) * R * TT * A + (i * tt + t) * A));
        }
    }
}

// Products of up to this many tokens (decode, short verification batches) decode
// in registers, with tiles shaped by the token count.
constexpr int64_t kFewTokens = 3;
// Up to how many tokens a product runs its register tiles straight from the
// packed weights (tile_direct, one pass over the rows per token tile) instead of
// decoding panels into a buffer first (a codec's kDirectTokens; default
// kFewTokens: only the decode-sized products). Where decoding a vector costs one
// or two operations, decoding it again per token tile is cheaper than the
// panel's store and reload at 16 tokens. Each output's sequence is the same either way.
template <class Fmt>
constexpr int64_t direct_tokens() {
  if constexpr (requires { Fmt::kDirectTokens; }) return Fmt::kDirectTokens;
  return kFewTokens;
}

// Tokens per pass over a row range: a long prompt's products run 64 tokens at a
// time, so a panel's accumulators and the activations of one column block stay
// in L2 (512 tokens at once spill both); each output's sequence is unchanged.
constexpr int64_t kTokenBlock = 64;

template <class Fmt>
void rows_fmt(const Fmt& dec, const QMatrix& W, int64_t r0, int64_t r1, const float* XP, int64_t n, float* Y,
              int64_t ldy) {
  const Layout L = layout_of<Fmt>(W);
  if (n > kTokenBlock) {
    for (int64_t t0 = 0; t0 < n; t0 += kTokenBlock)
      rows_fmt(dec, W, r0, r1, XP + t0 * L.padded, std::min(kTokenBlock, n - t0), Y + t0 * ldy, ldy);
    return;
  }
  Scratch& sc = Scratch::get();
  constexpr int kTileRows = tile_rows<Fmt>(), kPanelRows = panel_rows<Fmt>();
  constexpr int kMaxR = kPanelRows > 4 ? kPanelRows : 4;
  const int64_t slot = scale_slot(W, L);
  float* sbuf = Scratch::grow(sc.scales, size_t(kMaxR * slot));
  const int64_t tail_len = L.padded - L.full;
  float* tails = Scratch::grow(sc.tails, size_t(kMaxR * tail_len + 1));
  RowScales rs[kMaxR];
  const float* x[3] = {XP, XP + L.padded, XP + 2 * L.padded};

  // One row group: rows the SIMD order may not take go to the definition.
  auto group = [&](int64_t r, int R, auto&& run) {
    row_scales<Fmt>(W, L, r, R, sbuf, slot, rs);
    bool all_ok = true;
    for (int i = 0; i < R; ++i) all_ok &= rs[i].simd_ok;
    if (!all_ok) {
      for (int i = 0; i < R; ++i) {
        if (rs[i].simd_ok) {
          RowScales one = rs[i];
          tail_values<Fmt>(W, L, r + i, tails);
          run(r + i, 1, &one);
        } else {
          row_by_definition(W, L, r + i, XP, n, Y, ldy);
        }
      }
      return;
    }
    for (int i = 0; i < R; ++i) tail_values<Fmt>(W, L, r + i, tails + i * tail_len);
    run(r, R, rs);
  };

  if (n > kFewTokens && n <= direct_tokens<Fmt>()) {
    constexpr int TR = kTileRows, TT = tile_tokens<Fmt>();
    auto run = [&](int64_t r, int R, const RowScales* rsp) {
      for (int64_t t0 = 0; t0 < n; t0 += TT) {
        const int tt = int(std::min<int64_t>(TT, n - t0));
        const float* xt[TT];
        for (int t = 0; t < tt; ++t) xt[t] = XP + (t0 + t) * L.padded;
        float* Yt = Y + t0 * ldy;
        with_tokens<TT>(tt, [&]<int T>() HWY_ATTR {
          if (R == TR) tile_direct<Fmt, TR, T>(dec, W, L, rsp, tails, r, r1, xt, Yt, ldy);
          else tile_direct<Fmt, 1, T>(dec, W, L, rsp, tails, r, r1, xt, Yt, ldy);
        });
      }
    };
    int64_t r = r0;
    for (; r + TR <= r1; r += TR) group(r, TR, run);
    for (; r < r1; ++r) group(r, 1, run);
    return;
  }
  if (n <= kFewTokens) {
    // Few tokens (decode, short verification batches): decode in registers.
    constexpr int MR = matvec_rows<Fmt>();
    const int Rn = n == 1 ? MR : n == 2 ? 2 : 1;
    auto run = [&](int64_t r, int R, const RowScales* rsp) {
      if (n == 1) {
        if (R == MR) return tile_direct<Fmt, MR, 1>(dec, W, L, rsp, tails, r, r1, x, Y, ldy);
        return tile_direct<Fmt, 1, 1>(dec, W, L, rsp, tails, r, r1, x, Y, ldy);
      }
      if (n == 2) {
        if (R == 2) return tile_direct<Fmt, 2, 2>(dec, W, L, rsp, tails, r, r1, x, Y, ldy);
        return tile_direct<Fmt, 1, 2>(dec, W, L, rsp, tails, r, r1, x, Y, ldy);
      }
      return tile_direct<Fmt, 1, 3>(dec, W, L, rsp, tails, r, r1, x, Y, ldy);
    };
    int64_t r = r0;
    for (; r + Rn <= r1; r += Rn) group(r, Rn, run);
    for (; r < r1; ++r) group(r, 1, run);
    return;
  }
  // Panels of kPanelRows rows (whole tiles), then single rows.
  auto run = [&](int64_t r, int R, const RowScales* rsp) {
    if (R % kTileRows == 0) return panel_buffered<Fmt, kTileRows>(dec, W, L, rsp, tails, r, R, r1, XP, n, Y, ldy);
    return panel_buffered<Fmt, 1>(dec, W, L, rsp, tails, r, R, r1, XP, n, Y, ldy);
  };
  int64_t r = r0;
  for (; r + kPanelRows <= r1; r += kPanelRows) group(r, kPanelRows, run);
  for (; r + kTileRows <= r1; r += kTileRows) group(r, kTileRows, run);
  for (; r < r1; ++r) group(r, 1, run);
}

void Rows(const QMatrix& W, int64_t r0, int64_t r1, const float* XP, int64_t n, float* Y, int64_t ldy) {
  switch (W.fmt) {
#define SLUICE_WEIGHT_FORMAT(id, name, codec) \
  case WeightFormat::id: return rows_fmt(codec##Codec(), W, r0, r1, XP, n, Y, ldy);
#include "kernels/weight_formats.def"
  }
}

// y += a^T W with the reference's operations (the exactly scaled weight, then a
// multiply and an add per element), so it equals the scalar result bit for bit.
template <class Fmt>
void transposed_fmt(const Fmt& dec, const QMatrix& W, const float* a, float* y) {
  const Layout L = layout_of<Fmt>(W);
  const DF df;
  std::vector<float> yp(size_t(L.padded), 0.0f);
  PrepareX(W, y, 1, W.cols, yp.data());
  std::vector<int64_t> pos(static_cast<size_t>(W.cols));
  for (int64_t s = 0; s < L.steps; ++s)
    for (int64_t p = 0; p < L.S; ++p) pos[size_t(s * L.S + L.perm[p])] = s * L.S + p;
  for (int64_t c = L.full; c < W.cols; ++c) pos[size_t(c)] = c;
  const int64_t slot = scale_slot(W, L);
  std::vector<float> sbuf(static_cast<size_t>(slot));
  const int64_t F = Fmt::kScaled ? Fmt::scale_steps(W) : 1;
  int64_t c_simd_end = L.full;
  for (int64_t r = 0; r < W.rows; ++r) {
    if (a[r] == 0.0f) continue;
    RowScales rs;
    row_scales<Fmt>(W, L, r, 1, sbuf.data(), slot, &rs);
    c_simd_end = rs.simd_ok ? L.full : 0;
    const VF ar = hn::Set(df, a[r]);
    const uint8_t* p = W.data + r * W.row_bytes;
    for (int64_t s = 0; s < c_simd_end / Fmt::S; ++s) {
      VF w[Fmt::V];
      if constexpr (Fmt::kScaled) step_exact(dec, p, s, dec.scale_of(rs, s, s / F), w);  // the definition's weights
      else dec.step(p, s, w);
      for (int64_t v = 0; v < Fmt::V; ++v) {
        float* yv = yp.data() + s * Fmt::S + v * kN;
        const VF wv = Fmt::kRowScale ? hn::Mul(w[v], hn::Set(df, rs.final_scale)) : w[v];
        hn::StoreU(hn::Add(hn::LoadU(df, yv), hn::Mul(ar, wv)), df, yv);
      }
    }
    for (int64_t c = c_simd_end; c < W.cols; ++c) yp[size_t(pos[size_t(c)])] += a[r] * Fmt::decode(W, r, c);
  }
  for (int64_t c = 0; c < W.cols; ++c) y[c] = yp[size_t(pos[size_t(c)])];
}

void TransposedAcc(const QMatrix& W, const float* a, float* y) {
  switch (W.fmt) {
#define SLUICE_WEIGHT_FORMAT(id, name, codec) \
  case WeightFormat::id: return transposed_fmt(codec##Codec(), W, a, y);
#include "kernels/weight_formats.def"
  }
}

// Four streams at once (like a 4-row matvec), which is what the hardware
// prefetchers need to reach full bandwidth.
float ReadSum(const float* p, int64_t n) {
  const DF df;
  VF a0 = hn::Zero(df), a1 = a0, a2 = a0, a3 = a0;
  const int64_t q = n / (4 * kN) * kN;  // floats per stream
  const float *p0 = p, *p1 = p + q, *p2 = p + 2 * q, *p3 = p + 3 * q;
  for (int64_t i = 0; i < q; i += kN) {
    a0 = hn::Add(a0, hn::LoadU(df, p0 + i));
    a1 = hn::Add(a1, hn::LoadU(df, p1 + i));
    a2 = hn::Add(a2, hn::LoadU(df, p2 + i));
    a3 = hn::Add(a3, hn::LoadU(df, p3 + i));
  }
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (int64_t i = 4 * q; i < n; ++i) s += p[i];
  return s;
}

// 12 independent accumulators: enough to cover the FMA latency (4 cycles) on
// two pipes, few enough to stay in 16 registers.
float FmaChains(float seed, int64_t iters) {
  const DF df;
  const VF m = hn::Set(df, 0.999999f), c = hn::Set(df, 1e-7f);
  VF a[12];
  for (int i = 0; i < 12; ++i) a[i] = hn::Set(df, seed + float(i));
  for (int64_t k = 0; k < iters; ++k)
    for (int i = 0; i < 12; ++i) a[i] = pinned(hn::MulAdd(a[i], m, c));
  VF s = a[0];
  for (int i = 1; i < 12; ++i) s = hn::Add(s, a[i]);
  return hn::GetLane(hn::SumOfLanes(df, s));
}

#endif  // dispatched targets

}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace sluice::kernels {

// The table kernels/isa.cpp chooses from (best first).
std::span<const IsaKernels> simd_isas() {
  static const IsaKernels table[] = {
#if HWY_TARGETS & HWY_AVX3
      {"avx512", HWY_AVX3, int(N_AVX3::kN), &N_AVX3::Handles, &N_AVX3::PaddedCols, &N_AVX3::PrepareX,
       &N_AVX3::Rows, &N_AVX3::TransposedAcc, &N_AVX3::ReadSum, &N_AVX3::FmaChains, {}},
#endif
#if HWY_TARGETS & HWY_AVX2
      {"avx2", HWY_AVX2, int(N_AVX2::kN), &N_AVX2::Handles, &N_AVX2::PaddedCols, &N_AVX2::PrepareX, &N_AVX2::Rows,
       &N_AVX2::TransposedAcc, &N_AVX2::ReadSum, &N_AVX2::FmaChains, {}},
#endif
#if HWY_TARGETS & HWY_NEON
      {"neon", HWY_NEON, int(N_NEON::kN), &N_NEON::Handles, &N_NEON::PaddedCols, &N_NEON::PrepareX, &N_NEON::Rows,
       &N_NEON::TransposedAcc, &N_NEON::ReadSum, &N_NEON::FmaChains, {}},
#endif
  };
  return {table, sizeof(table) / sizeof(table[0])};
}

}  // namespace sluice::kernels
#endif  // HWY_ONCE
