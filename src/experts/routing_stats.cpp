#include "experts/routing_stats.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "util/error.h"

namespace sluice {

namespace {

using Steps = std::vector<std::vector<int32_t>>;

bool contains(const std::vector<int32_t>& v, int32_t e) { return std::find(v.begin(), v.end(), e) != v.end(); }

// Distinct experts per window of `w` tokens, summed over the full windows; returns the window count.
int64_t distinct_in_windows(const Steps& s, int64_t w, int64_t tokens, double& sum) {
  int64_t n = 0;
  for (int64_t a = 0; a + w <= tokens; a += w, ++n) {
    std::vector<int32_t> seen;
    for (int64_t t = a; t < a + w; ++t) seen.insert(seen.end(), s[size_t(t)].begin(), s[size_t(t)].end());
    std::sort(seen.begin(), seen.end());
    sum += double(std::unique(seen.begin(), seen.end()) - seen.begin());
  }
  return n;
}

// Online co-occurrence guess of `next`'s picks from `prev`'s, token by token; adds right and total picks.
void predict_next_layer(const Steps& prev, const Steps& next, int32_t E_prev, int32_t E_next, int64_t tokens,
                        int64_t& right, int64_t& total) {
  std::vector<int64_t> co(static_cast<size_t>(E_prev) * static_cast<size_t>(E_next), 0);
  std::vector<int64_t> score(static_cast<size_t>(E_next), 0);
  std::vector<int32_t> order(static_cast<size_t>(E_next), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    const auto& p = prev[size_t(t)];
    const auto& n = next[size_t(t)];
    std::fill(score.begin(), score.end(), 0);
    for (int32_t e : p)
      for (int32_t f = 0; f < E_next; ++f) score[size_t(f)] += co[size_t(e) * size_t(E_next) + size_t(f)];
    std::iota(order.begin(), order.end(), 0);
    const size_t k = std::min(n.size(), order.size());
    std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(k), order.end(), [&](int32_t a, int32_t b) {
      return score[size_t(a)] > score[size_t(b)] || (score[size_t(a)] == score[size_t(b)] && a < b);
    });
    for (size_t j = 0; j < k; ++j)
      if (score[size_t(order[j])] > 0 && contains(n, order[j])) ++right;
    total += int64_t(n.size());
    for (int32_t e : p)
      for (int32_t f : n) ++co[size_t(e) * size_t(E_next) + size_t(f)];
  }
}

}  // namespace

RoutingStats routing_stats(const RoutingLog& log, const std::vector<int32_t>& experts_per_layer) {
  std::map<int32_t, Steps> per_layer;
  for (const auto& [l, ids] : log.steps) {
    if (l < 0 || l >= int32_t(experts_per_layer.size()) || experts_per_layer[size_t(l)] <= 0)
      fail("routing stats: layer {} has no routed experts", l);
    for (int32_t e : ids)
      if (e < 0 || e >= experts_per_layer[size_t(l)])
        fail("routing stats: expert {} of layer {} is outside [0, {})", e, l, experts_per_layer[size_t(l)]);
    per_layer[l].push_back(ids);
  }
  RoutingStats r;
  if (per_layer.empty()) return r;
  r.layers = int64_t(per_layer.size());
  r.tokens = INT64_MAX;
  for (const auto& [l, s] : per_layer) r.tokens = std::min<int64_t>(r.tokens, int64_t(s.size()));
  const int64_t T = r.tokens;
  r.window_tokens = std::min<int64_t>(100, T);
  int64_t reused = 0, after_first = 0, picks = 0, hot = 0, windows = 0, right = 0, total = 0;
  double distinct = 0;
  const Steps* prev = nullptr;
  int32_t prev_layer = -1;
  for (const auto& [l, s] : per_layer) {
    const int32_t E = experts_per_layer[size_t(l)];
    std::vector<int64_t> hist(static_cast<size_t>(E), 0);
    for (int64_t t = 0; t < T; ++t)
      for (int32_t e : s[size_t(t)]) {
        ++hist[size_t(e)];
        ++picks;
        if (t > 0) {
          ++after_first;
          if (contains(s[size_t(t - 1)], e)) ++reused;
        }
      }
    std::sort(hist.begin(), hist.end(), std::greater<>());
    const int64_t n_hot = (3 * int64_t(E) + 9) / 10;  // ceil(0.3 E)
    hot += std::accumulate(hist.begin(), hist.begin() + n_hot, int64_t(0));
    if (T > 0) windows += distinct_in_windows(s, r.window_tokens, T, distinct);
    if (prev) {
      int64_t lr = 0, lt = 0;
      predict_next_layer(*prev, s, experts_per_layer[size_t(prev_layer)], E, T, lr, lt);
      r.next_layer_predictable_per_layer.push_back(lt ? double(lr) / double(lt) : 0.0);
      right += lr;
      total += lt;
    }
    prev = &s;
    prev_layer = l;
  }
  r.prev_token_overlap = after_first ? double(reused) / double(after_first) : 0.0;
  r.hottest_30pct_share = picks ? double(hot) / double(picks) : 0.0;
  r.distinct_per_100_tokens = windows ? distinct / double(windows) : 0.0;
  r.next_layer_predictable = total ? double(right) / double(total) : 0.0;
  return r;
}

nlohmann::json RoutingStats::to_json() const {
  return {{"tokens", tokens},
          {"layers", layers},
          {"prev_token_overlap", prev_token_overlap},
          {"distinct_per_100_tokens", distinct_per_100_tokens},
          {"distinct_window_tokens", window_tokens},
          {"next_layer_predictable", next_layer_predictable},
          {"next_layer_predictable_per_layer", next_layer_predictable_per_layer},
          {"hottest_30pct_share", hottest_30pct_share}};
}

}  // namespace sluice
