#include "experts/route_override.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "experts/routing_stats.h"
#include "util/error.h"

namespace sluice {

namespace {

// ---- trace replay ----

class TraceRoutes : public RouteOverride {
 public:
  TraceRoutes(std::string path, std::map<int32_t, std::vector<std::vector<int32_t>>> rows, int64_t tokens)
      : path_(std::move(path)), rows_(std::move(rows)), tokens_(tokens) {}

  void route(int32_t layer, int64_t T, int64_t k, int32_t* ids) override {
    auto it = rows_.find(layer);
    if (it == rows_.end())
      fail("{}: field \"routes\" has no entry for MoE layer {} (the model routes it)", path_, layer);
    Layer& L = state_[layer];
    if (!L.checked) {
      for (size_t i = 0; i < it->second.size(); ++i)
        if (int64_t(it->second[i].size()) != k)
          fail("{}: field \"routes\": entry {} of layer {} has {} experts; the model picks {} per token", path_, i,
               layer, it->second[i].size(), k);
      L.checked = true;
    }
    const auto& rows = it->second;
    for (int64_t t = 0; t < T; ++t) {
      const auto& r = rows[L.next % rows.size()];
      ++L.next;
      std::copy(r.begin(), r.end(), ids + t * k);
    }
  }
  std::string describe() const override {
    return fmt::format("trace {} ({} recorded tokens, replayed in order, cycling)", path_, tokens_);
  }

 private:
  struct Layer {
    size_t next = 0;
    bool checked = false;
  };
  std::string path_;
  std::map<int32_t, std::vector<std::vector<int32_t>>> rows_;
  int64_t tokens_;
  std::map<int32_t, Layer> state_;
};

// ---- synthetic routes ----
//
// Construction, per MoE layer l (E experts, k picks per token), for each token:
//  1. each of the previous token's picks of layer l is kept with probability `overlap`;
//  2. each remaining slot, with probability q, takes m(e) for a random pick e of the same token in the
//     previous MoE layer, where m is a fixed random bijection between the two layers' experts that maps
//     hot experts to hot ones (so the co-occurrence of e and m(e) is what makes layer l predictable);
//  3. otherwise a fresh expert: from the layer's hot set (a random ceil(30%) of its experts) with
//     probability `hot`, else from the rest, uniformly.
// Steps 2 and 3 never take one of the previous token's picks, so the previous-token overlap is
// `overlap` on average exactly; every source of picks keeps the hot set's share at `hot`. The share of
// picks a next-layer predictor gets right comes from step 2 plus chance; q is calibrated once per layer
// shape (on a simulation of the same construction, by bisection) so that the statistic bench prints
// comes out at `next_layer`. With overlap + next_layer > 1 or a tiny layer the targets
// may be out of reach; bench prints the statistics the run actually had.
class SyntheticRoutes : public RouteOverride {
 public:
  SyntheticRoutes(const SyntheticRoutingSpec& spec, const std::vector<int32_t>& experts_per_layer)
      : spec_(spec), rng_(spec.seed) {
    int32_t prev = -1;
    for (int32_t l = 0; l < int32_t(experts_per_layer.size()); ++l) {
      const int32_t E = experts_per_layer[size_t(l)];
      if (E <= 0) continue;
      Layer& L = layers_[l];
      L.prev_layer = prev;
      L.E = E;
      std::vector<int32_t> perm(static_cast<size_t>(E));
      for (int32_t e = 0; e < E; ++e) perm[size_t(e)] = e;
      std::shuffle(perm.begin(), perm.end(), rng_);
      const size_t H = size_t(std::ceil(0.3 * double(E)));
      L.hot.assign(perm.begin(), perm.begin() + long(H));
      L.cold.assign(perm.begin() + long(H), perm.end());
      L.is_hot.assign(size_t(E), false);
      for (int32_t e : L.hot) L.is_hot[size_t(e)] = true;
      if (prev >= 0) {
        // m: the previous layer's i-th hot (cold) expert to a random hot (cold) expert of this one.
        const Layer& P = layers_[prev];
        L.map.assign(size_t(P.E), 0);
        std::vector<int32_t> h = L.hot, c = L.cold;
        std::shuffle(h.begin(), h.end(), rng_);
        std::shuffle(c.begin(), c.end(), rng_);
        for (size_t i = 0; i < P.hot.size(); ++i) L.map[size_t(P.hot[i])] = h[i % h.size()];
        for (size_t i = 0; i < P.cold.size(); ++i)
          L.map[size_t(P.cold[i])] = c.empty() ? h[i % h.size()] : c[i % c.size()];
      }
      prev = l;
    }
  }

  void route(int32_t layer, int64_t T, int64_t k, int32_t* ids) override {
    Layer& L = layer_of(layer, k);
    if (L.pending_T == T) {  // the prefetch guess already drew this pass
      std::copy(L.pending.begin(), L.pending.end(), ids);
      L.pending_T = -1;
    } else {
      generate(layer, T, k, L.pending);
      std::copy(L.pending.begin(), L.pending.end(), ids);
    }
    L.last = std::vector<int32_t>(ids, ids + T * k);
    L.last_T = T;
  }

  // Draws the pass now (route() will return the same), and guesses it: each pick kept with
  // probability next_layer, else replaced by a fresh expert, like a predictor right at that rate.
  bool hint(int32_t layer, int64_t T, int64_t k, int32_t* ids) override {
    Layer& L = layer_of(layer, k);
    generate(layer, T, k, L.pending);
    L.pending_T = T;
    std::uniform_real_distribution<double> u(0, 1);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int32_t> row(L.pending.begin() + t * k, L.pending.begin() + (t + 1) * k), guess;
      for (int32_t e : row)
        if (u(rng_) < spec_.next_layer) guess.push_back(e);
      while (int64_t(guess.size()) < k) guess.push_back(fresh(L, row, guess));
      std::copy(guess.begin(), guess.end(), ids + t * k);
    }
    return true;
  }

  std::string describe() const override { return "synthetic " + spec_.describe(); }

 private:
  struct Layer {
    int32_t E = 0, prev_layer = -1;
    std::vector<int32_t> hot, cold, map;
    std::vector<bool> is_hot;
    std::vector<int32_t> prev_row;  // the previous token's picks
    std::vector<int32_t> last;      // the last pass's rows (for the next layer's mapping)
    int64_t last_T = 0;
    std::vector<int32_t> pending;
    int64_t pending_T = -1;
    double q = -1;  // probability of a mapped pick per free slot (calibrated)
  };

  Layer& layer_of(int32_t layer, int64_t k) {
    auto it = layers_.find(layer);
    if (it == layers_.end()) fail("routing override: layer {} is not a MoE layer of the model", layer);
    Layer& L = it->second;
    if (int64_t(L.E) < k) fail("routing override: layer {} has {} experts, fewer than its {} picks", layer, L.E, k);
    if (L.q < 0) {  // the same for every layer of this width: calibrated once
      auto [at, fresh] = calibrated_.try_emplace({L.E, k}, 0.0);
      if (fresh) at->second = calibrate(L.E, k);
      L.q = at->second;
    }
    return L;
  }

  static bool has(const std::vector<int32_t>& v, int32_t e) { return std::find(v.begin(), v.end(), e) != v.end(); }

  // An expert in neither `avoid` nor `taken`: hot with probability `hot`, uniform in its class
  // (the other class when one is used up; `avoid` only when nothing else is left).
  int32_t fresh(Layer& L, const std::vector<int32_t>& avoid, const std::vector<int32_t>& taken) {
    std::uniform_real_distribution<double> u(0, 1);
    const bool hot_first = u(rng_) < spec_.hot;
    for (int pass = 0; pass < 2; ++pass) {
      const std::vector<int32_t>& cls = (pass == 0) == hot_first ? L.hot : L.cold;
      std::vector<int32_t> free;
      for (int32_t e : cls)
        if (!has(taken, e) && !has(avoid, e)) free.push_back(e);
      if (!free.empty()) return free[std::uniform_int_distribution<size_t>(0, free.size() - 1)(rng_)];
    }
    for (int32_t e = 0; e < L.E; ++e)
      if (!has(taken, e)) return e;
    fail("routing override: no expert left to pick");
  }

  void generate(int32_t layer, int64_t T, int64_t k, std::vector<int32_t>& out) {
    Layer& L = layers_[layer];
    const Layer* P = L.prev_layer >= 0 ? &layers_[L.prev_layer] : nullptr;
    const bool mapped = P && P->last_T == T && !L.map.empty();
    out.resize(size_t(T * k));
    std::uniform_real_distribution<double> u(0, 1);
    std::vector<int32_t> row, M;
    for (int64_t t = 0; t < T; ++t) {
      row.clear();
      for (int32_t e : L.prev_row)
        if (int64_t(row.size()) < k && u(rng_) < spec_.overlap) row.push_back(e);
      M.clear();
      if (mapped)
        for (int64_t j = 0; j < k; ++j) M.push_back(L.map[size_t(P->last[size_t(t * k + j)])]);
      while (int64_t(row.size()) < k) {
        if (!M.empty() && u(rng_) < L.q) {
          std::vector<int32_t> cand;
          for (int32_t e : M)
            if (!has(row, e) && !has(L.prev_row, e)) cand.push_back(e);
          if (!cand.empty()) {
            row.push_back(cand[std::uniform_int_distribution<size_t>(0, cand.size() - 1)(rng_)]);
            continue;
          }
        }
        row.push_back(fresh(L, L.prev_row, row));
      }
      std::copy(row.begin(), row.end(), out.begin() + t * k);
      L.prev_row = row;
    }
  }

  // The q at which bench's next-layer statistic (experts/routing_stats.h: an online co-occurrence
  // predictor, which learns the mapping only as it sees it) comes out at `next_layer`, on a two-layer
  // simulation of calibration_tokens tokens (bisection; deterministic: its own seed).
  double calibrate(int32_t E, int64_t k) const {
    auto share = [&](double q) {
      SyntheticRoutingSpec s = spec_;
      s.seed = 12345;
      SyntheticRoutes sim(s, {E, E});
      sim.layers_[0].q = sim.layers_[1].q = q;
      std::vector<int32_t> ids(static_cast<size_t>(k));
      RoutingLog log;
      const int64_t n = std::clamp<int64_t>(spec_.calibration_tokens, 100, 4000);
      for (int64_t t = 0; t < n; ++t)
        for (int32_t l = 0; l < 2; ++l) {
          sim.route(l, 1, k, ids.data());
          std::vector<int32_t> sorted = ids;
          std::sort(sorted.begin(), sorted.end());
          log.steps.push_back({l, std::move(sorted)});
        }
      return routing_stats(log, {E, E}).next_layer_predictable;
    };
    double lo = 0, hi = 1;
    if (share(hi) <= spec_.next_layer) return hi;
    if (share(lo) >= spec_.next_layer) return lo;
    for (int i = 0; i < 12; ++i) {
      const double mid = 0.5 * (lo + hi);
      (share(mid) < spec_.next_layer ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
  }

  SyntheticRoutingSpec spec_;
  std::mt19937_64 rng_;
  std::map<int32_t, Layer> layers_;
  std::map<std::pair<int32_t, int64_t>, double> calibrated_;  // q by (experts, picks)
};

}  // namespace

std::unique_ptr<RouteOverride> routing_trace(const std::string& path, const std::vector<int32_t>& experts_per_layer) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read the routing trace", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail("{}: not JSON ({}); expected `sluice routing-report --json` output", path, e.what());
  }
  if (!j.is_object() || !j.contains("routes") || !j["routes"].is_array() || j["routes"].empty())
    fail("{}: field \"routes\" is missing or empty (write it with `sluice routing-report --json`)", path);
  std::map<int32_t, std::vector<std::vector<int32_t>>> rows;
  const auto& routes = j["routes"];
  for (size_t i = 0; i < routes.size(); ++i) {
    const auto& r = routes[i];
    if (!r.is_array() || r.size() != 2 || !r[0].is_number_integer() || !r[1].is_array())
      fail("{}: field \"routes\"[{}] is not [layer, [expert ids]]", path, i);
    const int64_t layer = r[0].get<int64_t>();
    if (layer < 0 || layer >= int64_t(experts_per_layer.size()) || experts_per_layer[size_t(layer)] <= 0)
      fail("{}: field \"routes\"[{}]: layer {} is not a MoE layer of the model (its layers do not match)", path, i,
           layer);
    const int32_t E = experts_per_layer[size_t(layer)];
    std::vector<int32_t> ids;
    for (const auto& e : r[1]) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= E)
        fail("{}: field \"routes\"[{}]: {} is not an expert id of layer {} (0..{})", path, i, e.dump(), layer, E - 1);
      const int32_t id = e.get<int32_t>();
      if (std::find(ids.begin(), ids.end(), id) != ids.end())
        fail("{}: field \"routes\"[{}]: expert {} listed twice", path, i, id);
      ids.push_back(id);
    }
    if (ids.empty()) fail("{}: field \"routes\"[{}] has no expert ids", path, i);
    rows[int32_t(layer)].push_back(std::move(ids));
  }
  size_t tokens = SIZE_MAX;
  for (int32_t l = 0; l < int32_t(experts_per_layer.size()); ++l) {
    if (experts_per_layer[size_t(l)] <= 0) continue;
    auto it = rows.find(l);
    if (it == rows.end())
      fail("{}: field \"routes\" has no entry for MoE layer {} of the model (its layers do not match)", path, l);
    tokens = std::min(tokens, it->second.size());
  }
  if (tokens == SIZE_MAX) fail("{}: the model has no MoE layer to replay routes on", path);
  return std::make_unique<TraceRoutes>(path, std::move(rows), int64_t(tokens));
}

std::string SyntheticRoutingSpec::describe() const {
  return fmt::format("overlap={},hot={},next_layer={},seed={}", overlap, hot, next_layer, seed);
}

SyntheticRoutingSpec parse_synthetic_routing(const std::string& text) {
  SyntheticRoutingSpec s;
  if (text.empty() || text == "k3") return s;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      fail("--routing-synthetic: '{}' is not key=value (keys: overlap, hot, next_layer, seed)", item);
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    try {
      size_t used = 0;
      if (key == "seed") {
        s.seed = std::stoull(val, &used);
      } else {
        const double v = std::stod(val, &used);
        if (!(v >= 0 && v <= 1)) fail("--routing-synthetic: {} must be in [0, 1], got {}", key, val);
        if (key == "overlap") s.overlap = v;
        else if (key == "hot") s.hot = v;
        else if (key == "next_layer") s.next_layer = v;
        else fail("--routing-synthetic: unknown key '{}' (keys: overlap, hot, next_layer, seed)", key);
      }
      if (used != val.size()) throw std::invalid_argument(val);
    } catch (const std::logic_error&) {
      fail("--routing-synthetic: {}: '{}' is not a number", key, val);
    }
    pos = comma + 1;
  }
  return s;
}

std::unique_ptr<RouteOverride> synthetic_routing(const SyntheticRoutingSpec& spec,
                                                 const std::vector<int32_t>& experts_per_layer) {
  return std::make_unique<SyntheticRoutes>(spec, experts_per_layer);
}

}  // namespace sluice
