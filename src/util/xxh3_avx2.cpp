// XXH3 in AVX2 (this file alone is compiled with -mavx2; util/xxh3.cpp calls it
// only where the CPU has AVX2).
#define XXH_VECTOR XXH_AVX2
#define SLUICE_XXH3_NS avx2
#include "util/xxh3_impl-inl.h"
