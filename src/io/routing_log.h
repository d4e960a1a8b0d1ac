// Records which experts each MoE layer asked for, by wrapping the model's
// expert source. Fed one token at a time, each request is one token's top-k:
// the input of the routing report (usage skew, reuse between tokens).
#pragma once
#include <cstdint>
#include <vector>

#include "io/expert_source.h"

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

}  // namespace sluice
