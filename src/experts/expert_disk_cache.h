// Stream mode's on-disk expert cache: the sparse shards written by
// `sluice pull --stream` hold the spine and, once fetched, routed experts at
// their released offsets; routed experts not fetched yet are holes. The
// presence table sluice-expert-cache.json records which experts are present,
// the XXH3-64 of their bytes and when each was last used. It is rewritten
// atomically (temp file, fsync, rename), and an expert is marked present only
// after its bytes are written and fsynced, so it is never half-present.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "format/checkpoint.h"
#include "format/extent.h"

namespace sluice {

inline constexpr const char* kExpertCacheFile = "sluice-expert-cache.json";
inline constexpr const char* kRemoteFile = "sluice-remote.json";

// Where a stream-mode directory fetches its experts from (sluice-remote.json).
struct RemoteRepo {
  std::string base;      // e.g. https://huggingface.co
  std::string repo;      // e.g. deepseek-ai/DeepSeek-V3
  std::string revision = "main";
  // <base>/<repo>/resolve/<revision>/<file>
  std::string file_url(const std::string& file) const;
  void save(const std::string& dir) const;  // atomic
  static RemoteRepo load(const std::string& dir);
};
bool is_stream_dir(const std::string& dir);  // has sluice-remote.json

struct CachedExpert {
  uint64_t checksum = 0, bytes = 0, last_use = 0;
};

class ExpertDiskCache {
 public:
  // Loads DIR/sluice-expert-cache.json when present (an unreadable table is
  // reported and treated as empty: the experts are fetched again).
  explicit ExpertDiskCache(std::string dir);

  const CachedExpert* find(int32_t layer, int32_t expert) const;
  void mark(int32_t layer, int32_t expert, uint64_t checksum, uint64_t bytes);
  void unmark(int32_t layer, int32_t expert);
  void touch(int32_t layer, int32_t expert);
  void save();  // atomic; a no-op when nothing changed but use times
  void save_if_dirty(bool include_use_times);

  uint64_t bytes() const { return bytes_; }
  uint64_t max_bytes() const { return max_bytes_; }  // 0: unbounded
  void set_max_bytes(uint64_t b) {
    max_bytes_ = b;
    dirty_ = true;
  }
  uint64_t tick() const { return tick_; }
  const std::map<std::pair<int32_t, int32_t>, CachedExpert>& entries() const { return entries_; }
  // Least recently used first.
  std::vector<std::pair<int32_t, int32_t>> lru_order() const;

 private:
  std::string dir_;
  std::map<std::pair<int32_t, int32_t>, CachedExpert> entries_;
  uint64_t bytes_ = 0, max_bytes_ = 0, tick_ = 0;
  bool dirty_ = false, used_ = false;
};

// Writes a whole file atomically: DIR/name.tmp, fsync, rename, fsync DIR.
void write_file_atomic(const std::string& path, const std::string& contents);
void fsync_dir(const std::string& dir);

// Stream-mode maintenance shared by the runtime fetcher and `sluice cache`.
// Frees an expert's bytes in the shards (punches holes over its extents).
void punch_expert(const Checkpoint& ckpt, const std::vector<ExpertExtent>& extents);
// XXH3-64 of an expert's bytes as stored in the local shards.
uint64_t hash_local_expert(const Checkpoint& ckpt, const std::vector<ExpertExtent>& extents);

}  // namespace sluice
