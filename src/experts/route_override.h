// Benchmark-only routing sources (`sluice bench --routing-trace FILE` and
// `--routing-synthetic overlap=..,hot=..,next_layer=..`): expert ids that
// replace the router's in every MoE layer (compute/expert_source.h,
// ExpertSourceSlot::override_routes), so that the streaming cache is measured
// under routing like real models' rather than under what a random-weight or
// synthetic model's own router does. The tokens decoded under an override are
// not the model's: nothing but `bench` may install one.
//
// A pass's T rows are taken as T consecutive tokens (one row per decode step;
// a prefill chunk's rows in order; a batched pass's sequences one after another).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sluice {

class RouteOverride {
 public:
  virtual ~RouteOverride() = default;
  // Fills ids [T rows of k] with the picks of `layer` for the next T tokens (distinct per row).
  virtual void route(int32_t layer, int64_t T, int64_t k, int32_t* ids) = 0;
  // The next-layer prefetch guess for the T tokens `layer` routes next; false: no guess.
  virtual bool hint(int32_t /*layer*/, int64_t /*T*/, int64_t /*k*/, int32_t* /*ids*/) { return false; }
  // What it is, for the benchmark's label ("trace FILE (N tokens)", "synthetic overlap=..").
  virtual std::string describe() const = 0;
};

// Replays `routes` of a `sluice routing-report --json` file: [[layer, [expert ids]], ...] in request
// order, one token per request. Layer l's n-th routed token takes the n-th entry of layer l, cycling
// when the decode outruns the trace. experts_per_layer[l] is the model's expert count of layer l (0:
// dense); the trace's layers must be exactly the model's MoE layers and its ids in range, each entry
// top_k distinct ids (checked when the layer is first routed, k coming from the model). Errors name
// the file and the field. No prefetch guess (the recording has none): prefetching is off in effect.
std::unique_ptr<RouteOverride> routing_trace(const std::string& path, const std::vector<int32_t>& experts_per_layer);

struct SyntheticRoutingSpec {
  double overlap = 0.31;     // share of a token's picks the previous token also picked (same layer)
  double hot = 0.86;         // share of picks taken by the hottest 30% of each layer's experts
  double next_layer = 0.5;   // share of a layer's picks predictable from the previous MoE layer's
  uint64_t seed = 1;
  // The run length next_layer is calibrated for: the statistic's online predictor learns the
  // layer-to-layer mapping as it goes, so a short run scores lower than a long one at the same
  // construction (bench sets its decode length; clamped to [100, 4000]).
  int64_t calibration_tokens = 1000;
  std::string describe() const;
};
// "overlap=0.31,hot=0.86,next_layer=0.5[,seed=N]" (any subset; the rest as above; "k3": all defaults).
SyntheticRoutingSpec parse_synthetic_routing(const std::string& text);

// A seeded generator per MoE layer (construction in route_override.cpp).
std::unique_ptr<RouteOverride> synthetic_routing(const SyntheticRoutingSpec& spec,
                                                 const std::vector<int32_t>& experts_per_layer);

}  // namespace sluice
