// Records which experts each MoE layer asked for, by wrapping the model's
// expert source. Fed one token at a time, each request is one token's top-k:
// the input of the routing report (usage skew, reuse between tokens).
#pragma once
#include <cstdint>
#include <vector>

#include "compute/expert_source.h"

namespace sluice {

struct RoutingLog {
  // steps[i] = (layer, sorted expert ids) in request order.
  std::vector<std::pair<int32_t, std::vector<int32_t>>> steps;
};

class RecordingExperts : public ExpertSource {
 public:
  RecordingExperts(ExpertSource& inner, RoutingLog& log) : inner_(inner), log_(log) {}
  void request(int32_t layer, const int32_t* e, int64_t n) override {
    log_.steps.push_back({layer, std::vector<int32_t>(e, e + n)});
    inner_.request(layer, e, n);
  }
  bool ready(int32_t l, int32_t e) override { return inner_.ready(l, e); }
  const ExpertWeights& acquire(int32_t l, int32_t e) override { return inner_.acquire(l, e); }
  void release(int32_t l, int32_t e) override { inner_.release(l, e); }
  void prefetch(int32_t l, const int32_t* e, int64_t n) override { inner_.prefetch(l, e, n); }
  ExpertStats stats() const override { return inner_.stats(); }

 private:
  ExpertSource& inner_;
  RoutingLog& log_;
};

// How one MoE layer routed a token sequence (one request per token).
struct LayerRouting {
  int32_t layer = 0, experts = 0;
  std::vector<int64_t> histogram;  // picks per expert
  double max_over_mean = 0, min_over_mean = 0;
  double normalized_entropy = 0;         // of the usage distribution, 1 = uniform
  double consecutive_reuse = 0;          // share of picks also picked by the previous token
  double uniform_consecutive_reuse = 0;  // the same under uniform random routing: k / E
  double mean_reuse_distance = 0;        // tokens between two picks of an expert
  std::vector<int64_t> lru_cache_sizes;  // per-layer LRU caches simulated (experts)
  std::vector<double> lru_hit_rate;      // hit rate of each
};

// Per MoE layer that made requests, in layer order; experts_per_layer[l] is
// layer l's expert count.
std::vector<LayerRouting> routing_report(const RoutingLog& log, const std::vector<int32_t>& experts_per_layer,
                                         const std::vector<int64_t>& lru_cache_sizes);

// The statistics of one layer's steps (each the sorted picks of one token).
LayerRouting layer_routing(int32_t layer, int32_t experts, const std::vector<std::vector<int32_t>>& steps,
                           const std::vector<int64_t>& lru_cache_sizes);

}  // namespace sluice
