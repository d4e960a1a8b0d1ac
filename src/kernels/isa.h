// The instruction sets the kernels were compiled for, and the one this process
// uses. Every SIMD target comes from one Highway source (kernels/matmul_simd.cpp);
// "scalar" is the reference code of matmul_scalar.cpp.
//
// The choice is made once, on first use: $SLUICE_ISA if set (scalar, avx2,
// avx512, neon; an ISA this CPU or this build lacks is an error, never a silent
// fallback), otherwise the best compiled ISA the CPU supports.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kernels/qmatrix.h"
#include "kernels/vector_ops.h"

namespace sluice::kernels {

// One instruction set's implementation of the matrix products.
struct IsaKernels {
  std::string_view name;  // "scalar", "avx2", "avx512", "neon"
  int64_t hwy_target;     // Highway target bit; 0 for the scalar reference
  int lanes;              // f32 lanes per vector (1 for scalar)

  // Whether this ISA has a kernel for W's format and layout. When false the
  // reference kernel runs instead, for every n, so results never depend on n.
  bool (*handles)(const QMatrix& W);
  // Activations in the column order the kernel reads them (a permutation within
  // each decoded step, zero padding to a whole number of vectors). Returns the
  // padded row length; XP must hold n * padded_cols(W) floats.
  int64_t (*padded_cols)(const QMatrix& W);
  void (*prepare_x)(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* XP);
  // Rows [r0, r1) of Y = X W^T from prepared activations (row stride padded_cols).
  void (*rows)(const QMatrix& W, int64_t r0, int64_t r1, const float* XP, int64_t n, float* Y, int64_t ldy);
  // y[c] += sum_r a[r] * W[r, c].
  void (*transposed_acc)(const QMatrix& W, const float* a, float* y);
  // Sum of p[0..n) with full-width loads: how fast this ISA streams memory.
  float (*read_sum)(const float* p, int64_t n);
  // `iters` rounds of 12 independent vector FMA chains (12 * iters FMAs): how many
  // FMAs a core of this ISA retires per cycle, measured instead of assumed
  // (Zen 4 splits a 512-bit FMA over its two 256-bit pipes: one per cycle, not two).
  float (*fma_chains)(float seed, int64_t iters);
  // The vector operations of kernels/ops.h.
  VectorOps vec;
};

// Compiled ISAs, best first; the scalar reference is always last.
std::span<const IsaKernels> compiled_isas();
bool cpu_supports(const IsaKernels& isa);
const IsaKernels* find_isa(std::string_view name);

// The revision of the arithmetic: raised whenever a CPU or GPU kernel changes the bits it computes
// (a summation order, a decode), so that saved states computed before (engine/model_identity.h) are
// not restored into a build whose passes would not reproduce them. 2: block-scaled CPU products
// scale each decoded weight; GPU MLA attention in key splits.
constexpr int kNumericsRevision = 2;

// The ISA every product uses (see the file comment for how it is chosen).
const IsaKernels& active_isa();
// Switches the ISA for the whole process (tests, benchmarks). Throws
// sluice::Error naming the ISA if it is unknown or the CPU lacks it.
void set_active_isa(std::string_view name);

// "avx2, avx512 (not supported by this CPU), scalar": what was compiled, for logs.
std::string describe_isas();

}  // namespace sluice::kernels
