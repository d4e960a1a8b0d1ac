// Summary statistics of the routes a model took, one token at a time (the
// routing log of experts/routing_log.h), in the terms published measurements of
// real models use, so a benchmark can state the routing it ran under:
// - prev_token_overlap: share of a token's picks that the previous token also
//   picked in the same layer (pooled over layers; ~0.31 measured on Kimi K3);
// - distinct_per_100_tokens: distinct experts one layer uses in a window of
//   100 consecutive tokens (of `window_tokens` when the run is shorter), mean
//   over windows and layers;
// - next_layer_predictable: share of a layer's picks that an online
//   co-occurrence predictor gets from the previous MoE layer's picks of the
//   same token: each expert of the next layer is scored by how often it came
//   with this token's previous-layer experts in the earlier tokens, and the k
//   best are the guess (ties to the lower id; nothing is guessed without
//   history, so the first tokens count as wrong);
// - hottest_30pct_share: share of picks taken by the ceil(30%) most used
//   experts of each layer, pooled (~0.856 on K3). Over few tokens this is
//   high by construction (k * tokens picks cannot cover many experts).
#pragma once
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "experts/routing_log.h"

namespace sluice {

struct RoutingStats {
  int64_t tokens = 0;  // tokens per layer (the fewest of any layer)
  int64_t layers = 0;  // MoE layers that made requests
  double prev_token_overlap = 0;
  double distinct_per_100_tokens = 0;
  int64_t window_tokens = 0;  // 100, or the run's length when shorter
  double next_layer_predictable = 0;
  std::vector<double> next_layer_predictable_per_layer;  // for each MoE layer after the first, in layer order
  double hottest_30pct_share = 0;
  nlohmann::json to_json() const;
};

// steps: one request per token and layer, in the order made (as RecordingExperts
// logs them when a model is fed one token at a time); experts_per_layer[l] is
// layer l's expert count. Errors name a layer or expert out of range.
RoutingStats routing_stats(const RoutingLog& log, const std::vector<int32_t>& experts_per_layer);

}  // namespace sluice
