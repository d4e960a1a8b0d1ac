// splitmix64's finaliser: a well-mixed 64-bit value for each input (seeded
// draws, hashing ids); one definition for every user.
#pragma once
#include <cstdint>

namespace sluice {
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace sluice
