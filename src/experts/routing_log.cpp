#include "experts/routing_log.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "util/error.h"

namespace sluice {

LayerRouting layer_routing(int32_t layer, int32_t E, const std::vector<std::vector<int32_t>>& steps,
                           const std::vector<int64_t>& lru_cache_sizes) {
  LayerRouting r;
  r.layer = layer;
  r.experts = E;
  r.lru_cache_sizes = lru_cache_sizes;
  std::vector<int64_t>& hist = r.histogram;
  hist.assign(static_cast<size_t>(E), 0);
  int64_t uses = 0, reused = 0, picks_after_first = 0;
  double dist_sum = 0;
  int64_t dist_n = 0;
  std::vector<int64_t> last(static_cast<size_t>(E), -1);
  for (size_t t = 0; t < steps.size(); ++t) {
    for (int32_t e : steps[t]) {
      if (e < 0 || e >= E) fail("routing log: expert {} of layer {} is outside [0, {})", e, layer, E);
      ++hist[size_t(e)];
      ++uses;
      if (last[size_t(e)] >= 0) {
        dist_sum += double(int64_t(t) - last[size_t(e)]);
        ++dist_n;
      }
      last[size_t(e)] = int64_t(t);
      if (t > 0) {
        ++picks_after_first;
        if (std::find(steps[t - 1].begin(), steps[t - 1].end(), e) != steps[t - 1].end()) ++reused;
      }
    }
  }
  if (uses == 0) return r;
  const double mean = double(uses) / E;
  double ent = 0;
  for (auto h : hist)
    if (h) ent -= (double(h) / uses) * std::log(double(h) / uses);
  r.normalized_entropy = ent / std::log(double(E));
  // An ideal LRU cache of C experts for this layer alone.
  for (auto C : lru_cache_sizes) {
    std::vector<int32_t> cache;  // most recent at the back
    int64_t hits = 0;
    for (const auto& st : steps)
      for (int32_t e : st) {
        auto it = std::find(cache.begin(), cache.end(), e);
        if (it != cache.end()) {
          ++hits;
          cache.erase(it);
        } else if (int64_t(cache.size()) >= C) {
          cache.erase(cache.begin());
        }
        cache.push_back(e);
      }
    r.lru_hit_rate.push_back(double(hits) / double(uses));
  }
  r.max_over_mean = double(*std::max_element(hist.begin(), hist.end())) / mean;
  r.min_over_mean = double(*std::min_element(hist.begin(), hist.end())) / mean;
  r.consecutive_reuse = picks_after_first ? double(reused) / double(picks_after_first) : 0;
  r.uniform_consecutive_reuse = steps.empty() ? 0 : double(steps[0].size()) / E;
  r.mean_reuse_distance = dist_n ? dist_sum / double(dist_n) : 0.0;
  return r;
}

std::vector<LayerRouting> routing_report(const RoutingLog& log, const std::vector<int32_t>& experts_per_layer,
                                         const std::vector<int64_t>& lru_cache_sizes) {
  std::map<int32_t, std::vector<std::vector<int32_t>>> per_layer;
  for (const auto& [l, e] : log.steps) per_layer[l].push_back(e);
  std::vector<LayerRouting> out;
  for (const auto& [l, steps] : per_layer) {
    if (l < 0 || l >= int32_t(experts_per_layer.size())) fail("routing log: layer {} has no routed experts", l);
    out.push_back(layer_routing(l, experts_per_layer[size_t(l)], steps, lru_cache_sizes));
  }
  return out;
}

}  // namespace sluice
