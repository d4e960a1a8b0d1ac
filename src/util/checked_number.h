// One checked conversion for every number a user gives (flags, environment
// variables, request fields) on its way to an integer: a double outside the
// integer type's range (1e30, inf, NaN) converts with undefined behaviour in
// C++, so each such conversion goes through here and fails with the name of
// what was given instead.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

#include "util/error.h"

namespace sluice {

// `v` as an Int (rounded toward zero, as a cast does). Throws Error "WHAT: V is
// out of range (MIN to MAX)" for NaN, infinities and values the type cannot hold.
template <typename Int>
Int checked_integer(double v, std::string_view what) {
  static_assert(std::numeric_limits<Int>::is_integer);
  // The bounds as doubles: the lowest is exact (0 or -2^k); one past the highest is 2^k, exact too.
  constexpr double lo = double(std::numeric_limits<Int>::min());
  constexpr double past_hi = (double(std::numeric_limits<Int>::max() / 2 + 1)) * 2.0;
  if (!(std::trunc(v) >= lo && std::trunc(v) < past_hi))
    fail("{}: {} is out of range ({} to {})", what, v, std::numeric_limits<Int>::min(),
         std::numeric_limits<Int>::max());
  return Int(v);
}

// `amount` of `unit` bytes (a GB or MiB flag) as a byte count. Throws Error
// "WHAT: AMOUNT is out of range (0 to MAX)", MAX in the flag's own unit.
inline uint64_t checked_bytes(double amount, double unit, std::string_view what) {
  const double past_hi = 18446744073709551616.0;  // 2^64
  if (!(amount >= 0 && amount * unit < past_hi))
    fail("{}: {} is out of range (0 to {:.6g})", what, amount, past_hi / unit);
  return uint64_t(amount * unit);
}

}  // namespace sluice
