// XXH3 in AVX-512 (this file alone is compiled with -mavx512f; util/xxh3.cpp
// calls it only where the CPU has AVX-512F).
// g++ 12 warns of its own avx512fintrin.h's deliberately undefined vectors
// (_mm512_undefined_*), inlined into every function of this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define XXH_VECTOR XXH_AVX512
#define SLUICE_XXH3_NS avx512
#include "util/xxh3_impl-inl.h"
