// Each MoE layer's picks as the MoE blocks request them (one request per layer
// and pass: fed one token at a time, one token's sorted picks), recorded while
// this is alive: the routes actually taken, for routing statistics (bench) and
// reports (routing-report). Through the engine's request observer, not by
// wrapping the expert source (installing a wrapper frees the streaming source
// it would wrap).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/engine.h"
#include "experts/routing_log.h"
#include "experts/routing_stats.h"

namespace sluice {

class RouteRecorder {
 public:
  explicit RouteRecorder(Engine& e) : e_(e) {
    e_.set_request_observer([this](int32_t layer, const int32_t* x, const int64_t*, int64_t n) {
      log_.steps.push_back({layer, std::vector<int32_t>(x, x + n)});
    });
  }
  ~RouteRecorder() { e_.set_request_observer({}); }
  RouteRecorder(const RouteRecorder&) = delete;
  RouteRecorder& operator=(const RouteRecorder&) = delete;
  const RoutingLog& log() const { return log_; }
  RoutingStats stats() const { return routing_stats(log_, e_.expert_index().experts_per_layer()); }

 private:
  Engine& e_;
  RoutingLog log_;
};

}  // namespace sluice
