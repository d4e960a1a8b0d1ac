// Logits of a golden fixture's prompt fed the way the streaming tests compare
// paths: shared by the tests that check one expert/spine path against another.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/session.h"
#include "support/test_support.h"

namespace sluice::test {

// The first 24 ids of a golden fixture's reference prompt.
inline std::vector<int32_t> golden_ids(const std::string& name) {
  auto v = read_i64(fixture("golden/" + name + "/reference.safetensors"), "input_ids");
  return std::vector<int32_t>(v.begin(), v.begin() + long(std::min<size_t>(v.size(), 24)));
}

// Prefill half, decode the rest one token at a time; all logits.
inline std::vector<float> prefill_half_then_decode(const Model& m, const std::vector<int32_t>& ids) {
  Session s(m);
  const size_t half = ids.size() / 2;
  auto out = s.feed_all(std::vector<int32_t>(ids.begin(), ids.begin() + long(half)));
  for (size_t t = half; t < ids.size(); ++t) {
    auto l = s.feed_all({ids[t]});
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

}  // namespace sluice::test
