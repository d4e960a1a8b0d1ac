// One XXH3 implementation compiled from the system header in this translation
// unit's instruction set (included by util/xxh3.cpp and util/xxh3_avx2.cpp,
// util/xxh3_avx512.cpp with XXH_VECTOR set): every function static, so each
// file's copy stays its own. SLUICE_XXH3_NS names it (its namespace, its
// name in Impl, and the accessor `<NS>_impl()` that util/xxh3.cpp calls).
#pragma once
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "util/xxh3.h"

#define SLUICE_XXH3_STR2(x) #x
#define SLUICE_XXH3_STR(x) SLUICE_XXH3_STR2(x)
#define SLUICE_XXH3_CAT2(a, b) a##b
#define SLUICE_XXH3_CAT(a, b) SLUICE_XXH3_CAT2(a, b)

namespace sluice::xxh3::SLUICE_XXH3_NS {
static_assert(sizeof(XXH3_state_t) == State::kBytes && alignof(XXH3_state_t) <= 64);
inline XXH3_state_t* st(void* s) { return static_cast<XXH3_state_t*>(s); }
inline const XXH3_state_t* st(const void* s) { return static_cast<const XXH3_state_t*>(s); }
inline Hash128 of(XXH128_hash_t h) { return {h.low64, h.high64}; }
inline const Impl impl = {
    SLUICE_XXH3_STR(SLUICE_XXH3_NS),
    [](const void* p, size_t n) -> uint64_t { return XXH3_64bits(p, n); },
    [](const void* p, size_t n) { return of(XXH3_128bits(p, n)); },
    // A state made by State, not XXH3_createState: reset sets every field
    // (XXH3_INITSTATE first, as the library asks of a state it did not allocate).
    [](void* s) {
      XXH3_INITSTATE(st(s));
      XXH3_64bits_reset(st(s));
    },
    [](void* s, const void* p, size_t n) { XXH3_64bits_update(st(s), p, n); },
    [](const void* s) -> uint64_t { return XXH3_64bits_digest(st(s)); },
    [](const void* s) { return of(XXH3_128bits_digest(st(s))); },
};
}  // namespace sluice::xxh3::SLUICE_XXH3_NS

namespace sluice::xxh3 {
const Impl& SLUICE_XXH3_CAT(SLUICE_XXH3_NS, _impl)() { return SLUICE_XXH3_NS::impl; }
}  // namespace sluice::xxh3
