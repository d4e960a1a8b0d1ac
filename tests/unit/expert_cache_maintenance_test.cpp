// cache status / verify / prune as library calls on a stream-mode directory
// made from a golden model: verify finds exactly the corrupted expert and
// --drop unmarks it and frees its bytes; prune evicts least recently used
// experts down to the bound, unmarking before punching.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "experts/expert_cache_maintenance.h"
#include "format/checkpoint.h"
#include "format/config.h"
#include "format/expert_index.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::expert_cache_maintenance_test {
namespace {

namespace fs = std::filesystem;

// A golden copy marked as a stream-mode directory with experts 0..n-1 of the
// first MoE layer cached (in that order of use), checksums as stored.
struct StreamDir {
  test::TempDir tmp;
  std::string dir;
  int32_t layer = -1;
  std::unique_ptr<Checkpoint> ck;
  std::unique_ptr<ExpertIndex> index;
  explicit StreamDir(int n) {
    dir = test::copy_golden(tmp, "qwen3_moe_tiny");
    RemoteRepo{"http://127.0.0.1:9", "org/name", "main"}.save(dir);
    ck = std::make_unique<Checkpoint>(dir, false);
    index = std::make_unique<ExpertIndex>(Config::load(dir), *ck);
    for (int32_t l = 0; l < index->layers() && layer < 0; ++l)
      if (index->experts(l) > 0) layer = l;
    ExpertDiskCache cache(dir);
    for (int32_t e = 0; e < n; ++e) {
      cache.mark(layer, e, hash_local_expert(*ck, index->extents(layer, e)), index->bytes(layer, e));
      cache.touch(layer, e);
    }
    cache.save();
  }
  bool zeroed(int32_t e) const {
    for (const auto& x : index->extents(layer, e)) {
      std::ifstream f(ck->files()[size_t(x.file)]->path(), std::ios::binary);
      f.seekg(std::streamoff(x.offset));
      std::string b(x.length, '\1');
      f.read(b.data(), std::streamsize(b.size()));
      if (b.find_first_not_of('\0') != std::string::npos) return false;
    }
    return true;
  }
};

TEST(ExpertCacheMaintenance, StatusCountsWhatIsCached) {
  StreamDir s(3);
  const CacheStatus st = expert_cache_status(s.dir);
  EXPECT_EQ(st.cached, 3);
  EXPECT_EQ(st.experts, s.index->count());
  EXPECT_EQ(st.cached_bytes, s.index->bytes(s.layer, 0) + s.index->bytes(s.layer, 1) + s.index->bytes(s.layer, 2));
  EXPECT_EQ(st.expert_bytes, s.index->total_bytes());
  EXPECT_EQ(st.repo.repo, "org/name");
  EXPECT_THROW(expert_cache_status(test::fixture("golden/qwen3_moe_tiny")), Error);  // not a stream-mode directory
}

TEST(ExpertCacheMaintenance, VerifyFindsTheCorruptExpertAndDropFreesIt) {
  StreamDir s(4);
  {  // flip one byte of expert 2
    const auto& x = s.index->extents(s.layer, 2)[0];
    std::fstream f(s.ck->files()[size_t(x.file)]->path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(x.offset + 10));
    char c;
    f.get(c);
    f.seekp(std::streamoff(x.offset + 10));
    f.put(char(c ^ 0x10));
  }
  CacheVerifyResult r = verify_expert_cache(s.dir, false);
  EXPECT_EQ(r.ok, 3);
  ASSERT_EQ(r.corrupt.size(), 1u);
  EXPECT_EQ(r.corrupt[0].expert, 2);
  EXPECT_NE(r.corrupt[0].why.find("XXH3"), std::string::npos) << r.corrupt[0].why;
  EXPECT_FALSE(r.dropped);
  EXPECT_EQ(expert_cache_status(s.dir).cached, 4);  // nothing changed without drop
  r = verify_expert_cache(s.dir, true);
  EXPECT_TRUE(r.dropped);
  EXPECT_EQ(expert_cache_status(s.dir).cached, 3);
  EXPECT_TRUE(s.zeroed(2));
  EXPECT_FALSE(s.zeroed(1));
  EXPECT_TRUE(verify_expert_cache(s.dir, false).corrupt.empty());
}

TEST(ExpertCacheMaintenance, PruneEvictsLeastRecentlyUsedFirst) {
  StreamDir s(4);
  const uint64_t one = s.index->bytes(s.layer, 0);
  // Room for the two most recently used (2 and 3) only.
  const CachePruneResult r = prune_expert_cache(s.dir, 2 * one + one / 2, true);
  EXPECT_EQ(r.evicted, 2);
  EXPECT_EQ(r.remaining, 2);
  EXPECT_EQ(r.freed_bytes, s.index->bytes(s.layer, 0) + s.index->bytes(s.layer, 1));
  EXPECT_TRUE(s.zeroed(0));
  EXPECT_TRUE(s.zeroed(1));
  EXPECT_FALSE(s.zeroed(2));
  EXPECT_EQ(expert_cache_bound(s.dir), 2 * one + one / 2);
  EXPECT_EQ(prune_expert_cache(s.dir, 0, false).remaining, 0);
  EXPECT_EQ(expert_cache_bound(s.dir), 2 * one + one / 2);  // the bound stays unless set
}

}  // namespace
}  // namespace sluice::expert_cache_maintenance_test
