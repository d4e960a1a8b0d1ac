#include "compute/expert_exchange.h"

#include <algorithm>

#include "util/error.h"

namespace sluice {

namespace {
ExpertExchange* g_exchange = nullptr;
}  // namespace

ExpertExchange* expert_exchange() { return g_exchange; }
void set_expert_exchange(ExpertExchange* exchange) { g_exchange = exchange; }

int32_t ExpertShards::owner(int32_t layer, int32_t expert) const {
  if (layer < 0 || size_t(layer) >= first.size() || first[size_t(layer)].empty())
    fail("internal: layer {} has no routed experts to shard", layer);
  const std::vector<int32_t>& f = first[size_t(layer)];
  if (expert < 0 || expert >= f.back()) fail("internal: no routed expert {} in layer {}", expert, layer);
  // The last boundary not after the expert (runs may be empty: take the rank whose run holds it).
  return int32_t(std::upper_bound(f.begin(), f.end(), expert) - f.begin()) - 1;
}

int32_t ExpertShards::owned_count(int32_t layer) const {
  if (!exchange || layer < 0 || size_t(layer) >= first.size() || first[size_t(layer)].empty()) return 0;
  const std::vector<int32_t>& f = first[size_t(layer)];
  return f[size_t(exchange->rank()) + 1] - f[size_t(exchange->rank())];
}

ExpertShards shard_experts(ExpertExchange& exchange, const std::vector<std::vector<uint64_t>>& bytes) {
  ExpertShards s;
  s.exchange = &exchange;
  const int32_t R = exchange.ranks();
  s.first.resize(bytes.size());
  for (size_t l = 0; l < bytes.size(); ++l) {
    const std::vector<uint64_t>& b = bytes[l];
    if (b.empty()) continue;
    uint64_t total = 0;
    for (const uint64_t x : b) total += x;
    std::vector<int32_t>& f = s.first[l];
    f.assign(size_t(R) + 1, int32_t(b.size()));
    f[0] = 0;
    // Rank r's run ends where the cumulative bytes first reach (r+1)/R of the total
    // (128-bit products: sizes times ranks cannot overflow).
    uint64_t cum = 0;
    int32_t r = 0;
    for (size_t e = 0; e < b.size() && r < R - 1; ++e) {
      cum += b[e];
      while (r < R - 1 && static_cast<unsigned __int128>(cum) * unsigned(R) >=
                              static_cast<unsigned __int128>(total) * unsigned(r + 1)) {
        f[size_t(r) + 1] = int32_t(e) + 1;
        ++r;
      }
    }
  }
  return s;
}

}  // namespace sluice
