// Stop strings over streamed text: generated text goes in piece by piece, and
// what comes out is safe to show. A tail that could still grow into a stop
// string is held back until it either does (and the output ends before it) or
// cannot any more.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);  // empty strings are ignored

  // Appends generated text; returns the text that can be released now. Once a stop
  // string appears, stopped() is true and nothing from the stop string on is released.
  std::string push(std::string_view text);
  // End of generation: releases whatever was held back (nothing after a stop).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& held() const { return pending_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace sluice
