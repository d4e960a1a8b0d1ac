// The baseline XXH3 (this build's default instruction set: SSE2 on x86-64, NEON
// on ARM64) and the choice among the variants the CPU runs.
#define SLUICE_XXH3_NS baseline
#include "util/xxh3_impl-inl.h"

#include <atomic>

namespace sluice::xxh3 {
#if SLUICE_XXH3_X86
const Impl& avx2_impl();    // util/xxh3_avx2.cpp
const Impl& avx512_impl();  // util/xxh3_avx512.cpp
#endif

std::vector<const Impl*> available() {
  std::vector<const Impl*> out;
#if SLUICE_XXH3_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) out.push_back(&avx512_impl());
  if (__builtin_cpu_supports("avx2")) out.push_back(&avx2_impl());
#endif
  out.push_back(&baseline_impl());
  return out;
}

namespace {
std::atomic<const Impl*>& chosen() {
  static std::atomic<const Impl*> c{available().front()};
  return c;
}
}  // namespace

const Impl& active() { return *chosen().load(std::memory_order_relaxed); }

bool select(const std::string& name) {
  for (const Impl* i : available())
    if (name == i->name) {
      chosen().store(i, std::memory_order_relaxed);
      return true;
    }
  return false;
}

}  // namespace sluice::xxh3
