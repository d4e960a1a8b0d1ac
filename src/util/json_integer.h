// One checked read of an integer from JSON that came from a file or a peer.
// nlohmann's get<T>() casts whatever number is stored: a float outside T's range
// (1e30 for a byte count) converts with undefined behaviour, and a negative
// number read as unsigned (or a large one read as int32) silently wraps. Every
// parser of a table sluice did not just write itself reads integers through here.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

namespace sluice {

// `v` as a T when it is an integer T can hold; with `integral_floats`, also a float
// with no fractional part in T's range (2.0 or 1e3, as some configs write). Otherwise
// nothing: NaN, infinities, fractions, strings and values out of range.
template <class T>
std::optional<T> json_integer(const nlohmann::json& v, bool integral_floats = false) {
  using L = std::numeric_limits<T>;
  static_assert(L::is_integer);
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(L::max())) return std::nullopt;
    return T(u);
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0 ? (!L::is_signed || i < int64_t(L::min())) : uint64_t(i) > uint64_t(L::max())) return std::nullopt;
    return T(i);
  }
  if (integral_floats && v.is_number_float()) {
    const double d = v.get<double>();
    // The bounds as doubles: the lowest is exact (0 or -2^k), one past the highest is 2^k.
    constexpr double lo = double(L::min());
    constexpr double past_hi = double(L::max() / 2 + 1) * 2.0;
    if (!(d >= lo && d < past_hi) || std::trunc(d) != d) return std::nullopt;
    return T(d);
  }
  return std::nullopt;
}

}  // namespace sluice
