#include "kernels/isa.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <hwy/targets.h>
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "util/error.h"

namespace sluice::kernels {

std::span<const IsaKernels> simd_isas();  // kernels/matmul_simd.cpp

namespace {

bool scalar_handles(const QMatrix&) { return true; }
int64_t scalar_padded_cols(const QMatrix& W) { return W.cols; }
void scalar_prepare_x(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* XP) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < W.cols; ++c) XP[t * W.cols + c] = X[t * ldx + c];
}
void scalar_rows(const QMatrix& W, int64_t r0, int64_t r1, const float* XP, int64_t n, float* Y, int64_t ldy) {
  matmul_rows_ref(W, r0, r1, XP, n, W.cols, Y, ldy);
}

float scalar_read_sum(const float* p, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}

float scalar_fma_chains(float seed, int64_t iters) {
  float a[12];
  for (int i = 0; i < 12; ++i) a[i] = seed + float(i);
  for (int64_t k = 0; k < iters; ++k)
    for (float& x : a) x = x * 0.999999f + 1e-7f;
  float s = 0.0f;
  for (const float x : a) s += x;
  return s;
}

const std::vector<IsaKernels>& all_isas() {
  static const std::vector<IsaKernels> v = [] {
    std::vector<IsaKernels> isas(simd_isas().begin(), simd_isas().end());
    for (IsaKernels& isa : isas)
      for (const VectorOps& ops : simd_vector_ops())
        if (ops.hwy_target == isa.hwy_target) isa.vec = ops;
    isas.push_back({"scalar", 0, 1, &scalar_handles, &scalar_padded_cols, &scalar_prepare_x, &scalar_rows,
                    &matvec_transposed_acc_ref, &scalar_read_sum, &scalar_fma_chains,
                    {0, &ops::dot_ref, &ops::axpy_ref, &ops::scale_ref, &ops::add_ref}});
    for (const IsaKernels& isa : isas)
      if (!isa.vec.dot) throw std::logic_error(std::string(isa.name) + ": no vector operations compiled");
    return isas;
  }();
  return v;
}

const IsaKernels& choose() {
  if (const char* env = std::getenv("SLUICE_ISA"); env && *env) {
    const IsaKernels* isa = find_isa(env);
    if (!isa) throw Error("SLUICE_ISA=" + std::string(env) + ": not an ISA of this build (" + describe_isas() + ")");
    if (!cpu_supports(*isa)) throw Error("SLUICE_ISA=" + std::string(env) + ": this CPU does not support it");
    return *isa;
  }
  for (const IsaKernels& isa : all_isas())
    if (cpu_supports(isa)) return isa;
  return all_isas().back();
}

std::atomic<const IsaKernels*> g_active{nullptr};
std::once_flag g_once;

}  // namespace

std::span<const IsaKernels> compiled_isas() { return all_isas(); }

bool cpu_supports(const IsaKernels& isa) { return isa.hwy_target == 0 || (hwy::SupportedTargets() & isa.hwy_target) != 0; }

const IsaKernels* find_isa(std::string_view name) {
  for (const IsaKernels& isa : all_isas())
    if (isa.name == name) return &isa;
  return nullptr;
}

const IsaKernels& active_isa() {
  const IsaKernels* a = g_active.load(std::memory_order_acquire);
  if (a) return *a;
  std::call_once(g_once, [] {
    const IsaKernels* expected = nullptr;
    g_active.compare_exchange_strong(expected, &choose());
  });
  return *g_active.load(std::memory_order_acquire);
}

void set_active_isa(std::string_view name) {
  const IsaKernels* isa = find_isa(name);
  if (!isa) throw Error("ISA " + std::string(name) + ": not compiled into this build (" + describe_isas() + ")");
  if (!cpu_supports(*isa)) throw Error("ISA " + std::string(name) + ": this CPU does not support it");
  active_isa();  // settle the first choice so it cannot overwrite this one
  g_active.store(isa, std::memory_order_release);
}

std::string describe_isas() {
  std::string s;
  for (const IsaKernels& isa : all_isas()) {
    if (!s.empty()) s += ", ";
    s += isa.name;
    if (!cpu_supports(isa)) s += " (not supported by this CPU)";
  }
  return s;
}

}  // namespace sluice::kernels
