// Stream mode's hook into StreamingExperts: a fetcher that makes experts
// present in the local files on first use gives bitwise the resident logits;
// present experts are never fetched again; a corrupt local copy is detected
// by its checksum, invalidated and fetched again. Plus the presence table and
// the repository-name parsing (the HTTP side is covered by tests/remote).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "experts/expert_disk_cache.h"
#include "experts/streaming_experts.h"
#include "io/http_client.h"
#include "engine/engine.h"
#include "runtime/session.h"
#include "store/pull.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::remote_experts_test {
namespace {

namespace fs = std::filesystem;

std::vector<float> run(const Model& m, const std::vector<int32_t>& ids) {
  Session s(m);
  auto out = s.feed_all(std::vector<int32_t>(ids.begin(), ids.begin() + 4));
  for (size_t t = 4; t < ids.size(); ++t) {
    auto l = s.feed_all({ids[t]});
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

// Copies expert bytes from the original checkpoint into the local (zeroed) copy.
class CopyFetcher : public ExpertFetcher {
 public:
  CopyFetcher(const Checkpoint& local, const ExpertTable& table, std::string orig_dir)
      : local_(local), table_(table), orig_(std::move(orig_dir)) {}
  void ensure(const std::vector<std::pair<int32_t, int32_t>>& experts) override {
    ++ensures;
    for (auto k : experts) {
      if (present_.count(k)) continue;
      ++fetched;
      std::vector<uint8_t> all;
      auto ex = expert_extents(local_, table_.at(k.first, k.second));
      for (const auto& x : ex) {
        const std::string name = fs::path(local_.files()[size_t(x.file)]->path()).filename().string();
        std::vector<uint8_t> b(x.length);
        int fd = ::open((fs::path(orig_) / name).c_str(), O_RDONLY);
        ASSERT_EQ(::pread(fd, b.data(), b.size(), off_t(x.offset)), ssize_t(b.size()));
        ::close(fd);
        all.insert(all.end(), b.begin(), b.end());
        if (corrupt_next) b[b.size() / 2] ^= 0x5a;  // a bad write the checksum must catch
        fd = ::open(local_.files()[size_t(x.file)]->path().c_str(), O_RDWR);
        ASSERT_EQ(::pwrite(fd, b.data(), b.size(), off_t(x.offset)), ssize_t(b.size()));
        ::fsync(fd);
        ::close(fd);
      }
      corrupt_next = false;
      sums_[k] = XXH3_64bits(all.data(), all.size());
      present_.insert(k);
    }
  }
  bool present(int32_t l, int32_t e) const override { return present_.count({l, e}) != 0; }
  bool checksum(int32_t l, int32_t e, uint64_t* out) const override {
    auto it = sums_.find({l, e});
    if (it == sums_.end()) return false;
    *out = it->second;
    return true;
  }
  void invalidate(int32_t l, int32_t e) override {
    ++invalidated;
    present_.erase({l, e});
  }
  int ensures = 0, fetched = 0, invalidated = 0;
  bool corrupt_next = false;

 private:
  const Checkpoint& local_;
  const ExpertTable& table_;
  std::string orig_;
  std::set<std::pair<int32_t, int32_t>> present_;
  std::map<std::pair<int32_t, int32_t>, uint64_t> sums_;
};

class RemoteHook : public ::testing::TestWithParam<std::string> {};

TEST_P(RemoteHook, FetchOnFirstUseIsBitwiseResident) {
  const std::string orig = test::fixture("golden/" + GetParam());
  test::TempDir tmp;
  const std::string local = tmp.file("m");
  fs::copy(orig, local, fs::copy_options::recursive);
  for (const auto& f : {"sluice-manifest.json", "sluice-spine.safetensors"}) fs::remove(fs::path(local) / f);
  // Zero every routed expert's bytes in the copy: they must come from the fetcher.
  {
    LoadOptions released;
    released.use_prepared_spine = false;
    auto dec = Engine::open(local, released);
    for (int32_t l = 0; l < dec->experts().layers(); ++l)
      for (int32_t e = 0; e < dec->experts().experts(l); ++e)
        for (const auto& x : expert_extents(dec->checkpoint(), dec->experts().at(l, e))) {
          std::vector<uint8_t> z(x.length, 0);
          int fd = ::open(dec->checkpoint().files()[size_t(x.file)]->path().c_str(), O_RDWR);
          ASSERT_EQ(::pwrite(fd, z.data(), z.size(), off_t(x.offset)), ssize_t(z.size()));
          ::close(fd);
        }
  }
  std::vector<int32_t> ids = {5, 17, 9, 100, 3, 44, 7, 8, 250, 61};
  const auto want = run(*load_model(orig), ids);

  LoadOptions released;
  released.use_prepared_spine = false;
  auto dec = Engine::open(local, released);
  auto fetcher = std::make_shared<CopyFetcher>(dec->checkpoint(), dec->experts(), orig);
  fetcher->corrupt_next = true;  // the very first expert is written wrong once
  StreamingOptions so;
  so.cache_bytes = 400u << 10;  // a few experts: forces re-reads of present experts
  so.fetcher = fetcher;
  dec->set_expert_source(std::make_unique<StreamingExperts>(dec->experts(), dec->checkpoint(), so));
  dec->set_prefetch(true);
  EXPECT_EQ(run(*dec, ids), want);
  EXPECT_GT(fetcher->fetched, 0);
  EXPECT_EQ(fetcher->invalidated, 1);
  const int fetched = fetcher->fetched;
  // Everything used is present now: a second pass fetches nothing.
  EXPECT_EQ(run(*dec, ids), want);
  EXPECT_EQ(fetcher->fetched, fetched);
}

INSTANTIATE_TEST_SUITE_P(Models, RemoteHook,
                         ::testing::Values("deepseek_v3_tiny_fp8", "qwen3_moe_tiny", "gpt_oss_tiny", "kimi_k3_tiny"));

TEST(ExpertDiskCache, RoundTripAndLru) {
  test::TempDir tmp;
  {
    ExpertDiskCache c(tmp.path());
    c.mark(1, 2, 0xabcdef, 100);
    c.mark(1, 3, 0x1234, 50);
    c.touch(1, 2);
    c.set_max_bytes(120);
    c.save();
  }
  ExpertDiskCache c(tmp.path());
  ASSERT_NE(c.find(1, 2), nullptr);
  EXPECT_EQ(c.find(1, 2)->checksum, 0xabcdefu);
  EXPECT_EQ(c.bytes(), 150u);
  EXPECT_EQ(c.max_bytes(), 120u);
  auto order = c.lru_order();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], std::make_pair(1, 3));  // (1,2) was used after (1,3)
  c.unmark(1, 3);
  EXPECT_EQ(c.bytes(), 100u);
  EXPECT_EQ(c.find(1, 3), nullptr);
  EXPECT_FALSE(fs::exists(tmp.file(std::string(kExpertCacheFile) + ".tmp")));
}

TEST(ExpertDiskCache, UnreadableTableMeansNothingCached) {
  test::TempDir tmp;
  { std::ofstream(tmp.file(kExpertCacheFile)) << "{\"version\": 1, \"experts\": [[1, 2, \"zz"; }
  ExpertDiskCache c(tmp.path());
  EXPECT_TRUE(c.entries().empty());
}

// Found by fuzz.stream_tables_fuzz: a repeated expert was counted twice in bytes().
TEST(ExpertDiskCache, RepeatedExpertMeansNothingCached) {
  test::TempDir tmp;
  {
    std::ofstream(tmp.file(kExpertCacheFile))
        << "{\"version\": 1, \"experts\": [[1, 2, \"ab\", 8196, 3], [1, 2, \"ab\", 8192, 4]]}";
  }
  ExpertDiskCache c(tmp.path());
  EXPECT_TRUE(c.entries().empty());
  EXPECT_EQ(c.bytes(), 0u);
}

// Found by fuzz.stream_tables_fuzz (CI, seed 123853978): a byte count of 1e30 was cast to an
// integer (undefined behaviour); every number of the table is checked instead.
TEST(ExpertDiskCache, NumbersOutOfRangeMeanNothingCached) {
  for (const char* table : {R"({"version": 1, "experts": [[1, 2, "ab", 1e30, 3]]})",
                            R"({"version": 1, "experts": [[1, 2, "ab", -8, 3]]})",
                            R"({"version": 1, "experts": [[1e12, 2, "ab", 8, 3]]})",
                            R"({"version": 1, "experts": [[1, 2, "ab", 8, 3.5]]})",
                            R"({"version": 1, "max_bytes": -1e300, "experts": []})",
                            R"({"version": 1e40, "experts": []})"}) {
    test::TempDir tmp;
    { std::ofstream(tmp.file(kExpertCacheFile)) << table; }
    ExpertDiskCache c(tmp.path());
    EXPECT_TRUE(c.entries().empty()) << table;
    EXPECT_EQ(c.bytes(), 0u) << table;
    EXPECT_EQ(c.max_bytes(), 0u) << table;
  }
}

TEST(Pull, SourceParsing) {
  auto a = parse_pull_source("org/name", "", "main");
  EXPECT_EQ(a.repo, "org/name");
  EXPECT_EQ(a.file_url("model-00001-of-00002.safetensors"),
            a.base + "/org/name/resolve/main/model-00001-of-00002.safetensors");
  auto b = parse_pull_source("http://127.0.0.1:8080/org/name/", "", "v1");
  EXPECT_EQ(b.base, "http://127.0.0.1:8080");
  EXPECT_EQ(b.repo, "org/name");
  EXPECT_EQ(b.file_url("a b.json"), "http://127.0.0.1:8080/org/name/resolve/v1/a%20b.json");
  auto c = parse_pull_source("org/name", "https://mirror.example/", "main");
  EXPECT_EQ(c.base, "https://mirror.example");
  EXPECT_THROW(parse_pull_source("http://host", "", "main"), Error);
  EXPECT_THROW(parse_pull_source("org/../x", "", "main"), Error);
}

}  // namespace
}  // namespace sluice::remote_experts_test
