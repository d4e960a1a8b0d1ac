// XXH3 (64- and 128-bit), the checksum of experts, spine files, state images
// and downloads, computed by the widest vector code this CPU runs. Debian's
// libxxhash is built for the architecture's baseline (SSE2 on x86-64), which
// hashed an expert read from disk at about 5 GB/s on one Zen 3 core, a second
// pass over every byte a prefill reads; its AVX2 and AVX-512 code paths are
// compiled here from the same header (util/xxh3_avx2.cpp, util/xxh3_avx512.cpp)
// and chosen once at run time. Every variant gives the same hashes (XXH3 is
// defined independently of the instructions computing it; tests/unit/xxh3_test.cpp
// compares them).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::xxh3 {

struct Hash128 {
  uint64_t low64 = 0, high64 = 0;
  bool operator==(const Hash128&) const = default;
};

// One implementation's functions (util/xxh3.cpp; each operates on an
// XXH3_state_t held in State::raw_).
struct Impl {
  const char* name;
  uint64_t (*hash64)(const void*, size_t);
  Hash128 (*hash128)(const void*, size_t);
  void (*reset)(void* state);  // XXH3_64bits_reset and XXH3_128bits_reset are one reset
  void (*update)(void* state, const void*, size_t);
  uint64_t (*digest64)(const void* state);
  Hash128 (*digest128)(const void* state);
};

// The implementations this CPU runs, best first ("avx512", "avx2", then
// "baseline": the system library).
std::vector<const Impl*> available();
// The one in use (the first of available() unless select() chose another).
const Impl& active();
// Uses the implementation of that name from now on (tests and benchmarks);
// false when this CPU or build has none.
bool select(const std::string& name);

inline uint64_t hash64(const void* p, size_t n) { return active().hash64(p, n); }
inline Hash128 hash128(const void* p, size_t n) { return active().hash128(p, n); }

// A streaming hash: reset, any number of updates, a digest (64 or 128 bits;
// XXH3's streaming state is the same for both). Bound to the implementation
// active when it was made.
class State {
 public:
  State() : impl_(&active()) { impl_->reset(raw_); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  void reset() { impl_->reset(raw_); }
  void update(const void* p, size_t n) { impl_->update(raw_, p, n); }
  uint64_t digest64() const { return impl_->digest64(raw_); }
  Hash128 digest128() const { return impl_->digest128(raw_); }

  static constexpr size_t kBytes = 576;  // sizeof(XXH3_state_t) (checked where it is defined)

 private:
  const Impl* impl_;
  alignas(64) unsigned char raw_[kBytes];
};

}  // namespace sluice::xxh3
