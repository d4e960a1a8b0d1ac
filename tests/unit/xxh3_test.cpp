// util/xxh3.h: every variant this CPU runs (AVX-512, AVX2, the baseline) gives
// the system library's XXH3 hashes, one-shot and streamed in any split.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <random>
#include <vector>

#include "util/xxh3.h"

namespace sluice {
namespace {

// Selects a variant for the scope, then the one in use before.
struct Using {
  explicit Using(const char* name) : before(xxh3::active().name) { EXPECT_TRUE(xxh3::select(name)) << name; }
  ~Using() { xxh3::select(before); }
  std::string before;
};

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = uint8_t(g());
  return b;
}

TEST(Xxh3, TheVariantsThisCpuRunsAreListedBestFirstWithTheBaselineLast) {
  const auto v = xxh3::available();
  ASSERT_FALSE(v.empty());
  EXPECT_STREQ(v.back()->name, "baseline");
  EXPECT_EQ(&xxh3::active(), v.front());  // nothing selected another yet
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2"), avx512 = __builtin_cpu_supports("avx512f");
  EXPECT_EQ(v.size(), size_t(1 + avx2 + avx512));
  if (avx2) {
    EXPECT_STREQ(v[avx512 ? 1 : 0]->name, "avx2");
  }
  if (avx512) {
    EXPECT_STREQ(v[0]->name, "avx512");
  }
#else
  EXPECT_EQ(v.size(), 1u);  // the wider variants are x86's
#endif
  EXPECT_FALSE(xxh3::select("no-such-variant"));
}

// Lengths around every internal boundary of XXH3 (16, 128, 240 bytes, the
// 1024-byte stripe block, the 256-byte internal buffer) and large ones, at
// unaligned starts.
TEST(Xxh3, EveryVariantGivesTheLibrarysHashes) {
  const std::vector<uint8_t> data = random_bytes((3 << 20) + 100, 7);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 1100; ++n) lengths.push_back(n);
  for (size_t n : {2047, 2048, 2049, 4095, 65536 + 3, (1 << 20) + 1, (3 << 20) + 37}) lengths.push_back(n);
  for (const xxh3::Impl* impl : xxh3::available()) {
    SCOPED_TRACE(impl->name);
    const Using use(impl->name);
    for (size_t n : lengths) {
      const uint8_t* p = data.data() + (n % 61);
      ASSERT_EQ(xxh3::hash64(p, n), XXH3_64bits(p, n)) << "length " << n;
      const XXH128_hash_t want = XXH3_128bits(p, n);
      const xxh3::Hash128 got = xxh3::hash128(p, n);
      ASSERT_EQ(got.low64, want.low64) << "length " << n;
      ASSERT_EQ(got.high64, want.high64) << "length " << n;
    }
  }
}

TEST(Xxh3, AStreamedHashIsTheOneShotHashWhateverTheSplit) {
  const std::vector<uint8_t> data = random_bytes((2 << 20) + 333, 11);
  std::mt19937_64 g(5);
  for (const xxh3::Impl* impl : xxh3::available()) {
    SCOPED_TRACE(impl->name);
    const Using use(impl->name);
    xxh3::State st;
    for (int trial = 0; trial < 24; ++trial) {
      const size_t n = trial < 12 ? size_t(g() % 5000) : data.size() - size_t(g() % 1000);
      st.reset();
      // Pieces of 0 to 2 * trial^2 + 300 bytes: many small updates, then a few large ones.
      for (size_t at = 0; at < n;) {
        const size_t piece = std::min(n - at, size_t(g() % (2 * size_t(trial) * size_t(trial) * 4096 + 300)));
        st.update(data.data() + at, piece);
        at += piece;
      }
      ASSERT_EQ(st.digest64(), XXH3_64bits(data.data(), n)) << "length " << n;
      const xxh3::Hash128 got = st.digest128();
      const XXH128_hash_t want = XXH3_128bits(data.data(), n);
      ASSERT_EQ(got.low64, want.low64) << "length " << n;
      ASSERT_EQ(got.high64, want.high64) << "length " << n;
      ASSERT_EQ(st.digest64(), XXH3_64bits(data.data(), n)) << "a digest leaves the state as it was";
    }
  }
}

}  // namespace
}  // namespace sluice
