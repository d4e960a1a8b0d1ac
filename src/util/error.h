// Error type used across the engine: every message names the file, tensor or
// field it is about, so a user can act on it without a debugger.
#pragma once
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace sluice {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace sluice
