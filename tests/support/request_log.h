// Each MoE layer's expert requests while a log is attached to an engine (Engine::set_request_observer):
// how many per layer, and which (layer, expert)s.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "engine/engine.h"

namespace sluice::test {

struct RequestLog {
  explicit RequestLog(const Engine& m) {
    m.set_request_observer([this](int32_t layer, const int32_t* x, const int64_t*, int64_t n) {
      ++requests[layer];
      for (int64_t i = 0; i < n; ++i) repeated = !routed.insert({layer, x[i]}).second || repeated;
    });
  }
  // Detaches, then checks that every layer asked once and no expert twice.
  void expect_one_request_per_layer(const Engine& m) const {
    m.set_request_observer({});
    EXPECT_FALSE(repeated) << "an expert was requested twice for one layer";
    ASSERT_FALSE(requests.empty());
    for (const auto& [layer, n] : requests) EXPECT_EQ(n, 1) << "layer " << layer << " ran more than one MoE pass";
  }
  std::map<int32_t, int> requests;
  std::set<std::pair<int32_t, int32_t>> routed;
  bool repeated = false;  // some (layer, expert) was requested again (by a later pass, or twice in one)
};

}  // namespace sluice::test
