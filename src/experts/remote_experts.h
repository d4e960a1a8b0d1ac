// Stream mode at run time: routed experts missing from the local sparse
// shards are fetched from the model's repository on first use.
//
// Each missing expert costs one HTTP range request per contiguous extent
// (usually one or a few per expert), all misses of a layer in parallel over a
// small pool of connections that are kept open between layers. A reply is
// accepted only if it is 206 with exactly the requested Content-Range and
// length; the expert's XXH3-64 is checked against the repository's
// sluice-manifest.json when it published one. The bytes are then pwritten at
// the expert's own offsets in the shard and fsynced, and only then is the
// expert marked present (ExpertDiskCache). With a size bound the least
// recently used experts are evicted (holes punched, unmarked first).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "experts/expert_disk_cache.h"
#include "experts/streaming_experts.h"
#include "format/checkpoint.h"
#include "format/expert_index.h"
#include "io/http_client.h"

namespace sluice {

struct RemoteOptions {
  int parallel = 8;              // range requests in flight at most
  uint64_t cache_max_bytes = 0;  // on-disk expert cache bound; 0: the table's own (from pull --cache-max), else unbounded
  HttpOptions http = http_options_from_env();
  bool offline = false;          // never touch the network (SLUICE_OFFLINE=1): a missing expert is an error
};

struct RemoteStats {
  uint64_t experts_fetched = 0, bytes_fetched = 0, requests = 0, retries = 0, evicted = 0, refetched = 0;
  double seconds = 0;
};

class RemoteExperts : public ExpertFetcher {
 public:
  // `manifest_checksums`: layer -> expert -> XXH3-64 published by the repository (may be empty).
  RemoteExperts(const std::string& dir, const Checkpoint& ckpt, const ExpertIndex& index,
                std::vector<std::vector<uint64_t>> manifest_checksums, RemoteOptions opts = {});
  ~RemoteExperts() override;

  void ensure(const std::vector<std::pair<int32_t, int32_t>>& experts) override;
  bool present(int32_t layer, int32_t expert) const override;
  bool checksum(int32_t layer, int32_t expert, uint64_t* out) const override;
  void invalidate(int32_t layer, int32_t expert) override;

  RemoteStats stats() const { return stats_; }
  const ExpertDiskCache& cache() const { return cache_; }

 private:
  bool manifest_checksum(int32_t layer, int32_t expert, uint64_t* out) const;
  void evict_over_limit(uint64_t protect_from_tick);
  std::string url_of(int32_t file) const;

  std::string dir_;
  const Checkpoint& ckpt_;
  std::vector<std::vector<std::vector<ExpertExtent>>> extents_;  // layer -> expert -> extents
  std::vector<std::vector<uint64_t>> manifest_;
  RemoteOptions opts_;
  RemoteRepo repo_;
  ExpertDiskCache cache_;
  std::vector<std::unique_ptr<HttpClient>> clients_;
  std::vector<int> fds_;  // shards opened for writing, lazily
  uint64_t prev_batch_tick_ = 0;
  mutable std::mutex mu_;
  RemoteStats stats_;
};

// Installs the fetcher for DIR when it is a stream-mode directory (sluice-remote.json);
// returns null otherwise.
std::shared_ptr<RemoteExperts> make_remote_fetcher(const std::string& dir, const Checkpoint& ckpt,
                                                   const ExpertIndex& index,
                                                   std::vector<std::vector<uint64_t>> manifest_checksums);

}  // namespace sluice
