// `sluice cache status|verify|prune`: inspecting and trimming the on-disk
// expert cache of a stream-mode directory (experts/expert_disk_cache.h). Experts
// are located through the expert index; no model is built.
//
// Crash safety: an expert leaves the cache by being unmarked in the presence
// table first (saved atomically), and only then are its bytes punched out, so
// an interruption never leaves an expert marked present with missing bytes.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "experts/expert_disk_cache.h"

namespace sluice {

struct CacheStatus {
  RemoteRepo repo;
  int64_t cached = 0, experts = 0;  // experts present, and routed experts of the model
  uint64_t cached_bytes = 0, expert_bytes = 0, max_bytes = 0;  // max_bytes 0: unbounded
};
// Throws naming the directory when it is not a stream-mode directory.
CacheStatus expert_cache_status(const std::string& dir);

struct CacheProblem {
  int32_t layer = 0, expert = 0;
  std::string why;  // e.g. "not an expert of this model", "XXH3 ..., recorded ..."
};
struct CacheVerifyResult {
  int64_t ok = 0;
  std::vector<CacheProblem> corrupt;
  bool dropped = false;  // corrupt ones were unmarked and their bytes freed
};
// Re-hashes every cached expert against its recorded checksum (and the
// published manifest's). With `drop`, corrupt experts are unmarked, then freed.
CacheVerifyResult verify_expert_cache(const std::string& dir, bool drop);

struct CachePruneResult {
  int64_t evicted = 0, remaining = 0;
  uint64_t freed_bytes = 0, remaining_bytes = 0;
};
// Evicts least recently used experts until the cache holds at most `limit`
// bytes (and records `limit` as the new bound when `set_bound`).
CachePruneResult prune_expert_cache(const std::string& dir, uint64_t limit, bool set_bound);
// The bound recorded by `pull --cache-max` (0: unbounded).
uint64_t expert_cache_bound(const std::string& dir);

}  // namespace sluice
