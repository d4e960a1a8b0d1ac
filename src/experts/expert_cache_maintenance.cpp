#include "experts/expert_cache_maintenance.h"

#include <fmt/format.h>

#include "format/checkpoint.h"
#include "format/config.h"
#include "format/expert_index.h"
#include "util/error.h"

namespace sluice {

namespace {
void require_stream_dir(const std::string& dir) {
  if (!is_stream_dir(dir))
    fail("{} is not a stream-mode directory (no {}; see `sluice pull --stream`)", dir, kRemoteFile);
}

bool known(const ExpertIndex& index, std::pair<int32_t, int32_t> k) {
  return k.first >= 0 && k.first < index.layers() && k.second >= 0 && k.second < index.experts(k.first);
}

// Unmarks first (saved atomically), then frees the bytes of those that are experts of this model.
void remove_experts(ExpertDiskCache& cache, const Checkpoint& ck, const ExpertIndex& index,
                    const std::vector<std::pair<int32_t, int32_t>>& victims) {
  for (auto k : victims) cache.unmark(k.first, k.second);
  cache.save();
  for (auto k : victims)
    if (known(index, k)) punch_expert(ck, index.extents(k.first, k.second));
}
}  // namespace

CacheStatus expert_cache_status(const std::string& dir) {
  require_stream_dir(dir);
  CacheStatus s;
  s.repo = RemoteRepo::load(dir);
  ExpertDiskCache cache(dir);
  const Checkpoint ck(dir, false);
  const ExpertIndex index(Config::load(dir), ck);
  s.experts = index.count();
  s.expert_bytes = index.total_bytes();
  s.cached = int64_t(cache.entries().size());
  s.cached_bytes = cache.bytes();
  s.max_bytes = cache.max_bytes();
  return s;
}

CacheVerifyResult verify_expert_cache(const std::string& dir, bool drop) {
  require_stream_dir(dir);
  ExpertDiskCache cache(dir);
  const Checkpoint ck(dir, false);
  const ExpertIndex index(Config::load(dir), ck);
  std::vector<std::vector<uint64_t>> man;
  if (const Manifest* m = ck.manifest()) man = m->checksum_table();
  CacheVerifyResult r;
  for (const auto& [k, c] : cache.entries()) {
    const auto [l, e] = k;
    if (!known(index, k)) {
      r.corrupt.push_back({l, e, "not an expert of this model"});
      continue;
    }
    const auto& ex = index.extents(l, e);
    const uint64_t bytes = index.bytes(l, e);
    const uint64_t h = hash_local_expert(ck, ex);
    const bool has_man = l < int32_t(man.size()) && e < int32_t(man[size_t(l)].size());
    std::string why;
    if (bytes != c.bytes) why = fmt::format("recorded as {} bytes, is {}", c.bytes, bytes);
    else if (h != c.checksum) why = fmt::format("XXH3 {:016x}, recorded {:016x}", h, c.checksum);
    else if (has_man && h != man[size_t(l)][size_t(e)])
      why = fmt::format("XXH3 {:016x}, manifest {:016x}", h, man[size_t(l)][size_t(e)]);
    if (why.empty()) ++r.ok;
    else r.corrupt.push_back({l, e, why});
  }
  if (drop && !r.corrupt.empty()) {
    std::vector<std::pair<int32_t, int32_t>> victims;
    for (const auto& p : r.corrupt) victims.push_back({p.layer, p.expert});
    remove_experts(cache, ck, index, victims);
    r.dropped = true;
  }
  return r;
}

uint64_t expert_cache_bound(const std::string& dir) {
  require_stream_dir(dir);
  return ExpertDiskCache(dir).max_bytes();
}

CachePruneResult prune_expert_cache(const std::string& dir, uint64_t limit, bool set_bound) {
  require_stream_dir(dir);
  ExpertDiskCache cache(dir);
  if (set_bound) cache.set_max_bytes(limit);
  const Checkpoint ck(dir, false);
  const ExpertIndex index(Config::load(dir), ck);
  std::vector<std::pair<int32_t, int32_t>> victims;
  uint64_t bytes = cache.bytes();
  CachePruneResult r;
  for (const auto& k : cache.lru_order()) {
    if (bytes <= limit) break;
    const uint64_t b = cache.find(k.first, k.second)->bytes;
    bytes -= b;
    r.freed_bytes += b;
    victims.push_back(k);
  }
  remove_experts(cache, ck, index, victims);
  r.evicted = int64_t(victims.size());
  r.remaining = int64_t(cache.entries().size());
  r.remaining_bytes = cache.bytes();
  return r;
}

}  // namespace sluice
