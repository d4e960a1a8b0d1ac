// The prompt cache (runtime/prompt_cache.h) driven as the server's generator
// drives it: conversations in memory slots and states in a directory, the
// longest usable prefix reused, eviction by count and bytes, files found
// again by a new cache (a restart), bad files ignored with a log line; every
// reply's logits bit for bit those of a fresh session.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/model_identity.h"
#include "runtime/prompt_cache.h"
#include "runtime/state_file.h"
#include "support/test_support.h"
#include "util/atomic_file.h"

namespace sluice::prompt_cache_test {
namespace {

std::vector<int32_t> seq(int n, int salt, int64_t vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t((uint64_t(i) * 31 + uint64_t(salt) * 977 + 5) % uint64_t(vocab)));
  return t;
}
std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Turn {
  int64_t reused = 0;
  std::vector<float> logits;  // after the prompt and the reply
};

// One request as the generator runs it: take, feed all but the last prompt
// token (saving at the save points and at the end), mark, last token, reply.
Turn request(PromptCache& cache, const std::vector<int32_t>& prompt, const std::vector<int32_t>& reply,
             const std::vector<int64_t>& boundaries = {}) {
  CachedConversation c = cache.take(prompt, boundaries);
  Session& s = *c.session;
  Turn t;
  t.reused = int64_t(s.tokens().size());
  for (int64_t p : cache.save_points()) {
    s.feed(std::vector<int32_t>(prompt.begin() + int64_t(s.tokens().size()), prompt.begin() + p));
    cache.save(s);
  }
  if (s.tokens().size() + 1 < prompt.size())
    s.feed(std::vector<int32_t>(prompt.begin() + int64_t(s.tokens().size()), prompt.end() - 1));
  cache.save(s);
  s.checkpoint(false);
  c.mark = int64_t(prompt.size()) - 1;
  t.logits = s.feed({prompt.back()});
  if (!reply.empty()) t.logits = s.feed(reply);
  cache.keep(std::move(c));
  return t;
}

std::vector<float> fresh(const Model& m, const std::vector<int32_t>& prompt, const std::vector<int32_t>& reply) {
  Session s(m);
  return s.feed(cat(prompt, reply));
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

PromptCacheOptions options(int64_t slots, uint64_t memory_bytes = 0, const std::string& dir = "",
                           const std::string& identity = "", uint64_t checkpoint_bytes = uint64_t(1) << 30) {
  PromptCacheOptions o;
  o.checkpoint_bytes = checkpoint_bytes;
  o.slots = slots;
  o.memory_bytes = memory_bytes;
  o.dir = dir;
  o.identity = identity;
  return o;
}

class PromptCacheTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { model = load_model(test::fixture(std::string("golden/") + GetParam())); }
  std::unique_ptr<Engine> model;
  int64_t V() const { return model->info().vocab; }
};

TEST_P(PromptCacheTest, AlternatingConversationsBothReuse) {
  PromptCache cache(*model, options(2));
  const auto a = seq(12, 1, V()), b = seq(12, 2, V()), ra = seq(3, 3, V()), rb = seq(3, 4, V());
  EXPECT_EQ(request(cache, a, ra).reused, 0);
  EXPECT_EQ(request(cache, b, rb).reused, 0);
  const auto a2 = cat(cat(a, ra), seq(5, 5, V())), b2 = cat(cat(b, rb), seq(5, 6, V()));
  const Turn ta = request(cache, a2, {}), tb = request(cache, b2, {});
  EXPECT_EQ(ta.reused, int64_t(a.size() + ra.size()));
  EXPECT_EQ(tb.reused, int64_t(b.size() + rb.size()));
  EXPECT_TRUE(same(ta.logits, fresh(*model, a2, {})));
  EXPECT_TRUE(same(tb.logits, fresh(*model, b2, {})));
  // A repeat of a prompt rolls its reply back; the longest match wins over a shorter one.
  const Turn again = request(cache, a2, {});
  EXPECT_EQ(again.reused, int64_t(a2.size()) - 1);
  EXPECT_TRUE(same(again.logits, ta.logits));
  EXPECT_EQ(cache.slots_in_memory(), 2);
}

// Issue 31 item 5: a new session sharing an earlier one's system prompt and
// tools (the boundary the server finds) starts from them in memory, without a
// directory, also on recurrent models whose state cannot be cut, and prefills
// only the tokens after them; the first session goes on from its own state.
TEST_P(PromptCacheTest, NewSessionStartsAtTheSharedSystemPrompt) {
  const auto sys = seq(40, 1, V());
  const std::vector<int64_t> at{int64_t(sys.size())};
  const auto p1 = cat(sys, seq(6, 2, V())), r1 = seq(2, 8, V());
  PromptCache cache(*model, options(1));
  EXPECT_EQ(request(cache, p1, r1, at).reused, 0);
  EXPECT_EQ(cache.checkpoints(), 1);
  const auto p1b = cat(cat(p1, r1), seq(4, 5, V()));
  const Turn t1b = request(cache, p1b, seq(2, 9, V()), at);
  EXPECT_EQ(t1b.reused, int64_t(p1.size() + r1.size()));
  EXPECT_TRUE(same(t1b.logits, fresh(*model, p1b, seq(2, 9, V()))));
  // New sessions: only the tokens after the system prompt are prefilled.
  for (int salt : {3, 4}) {
    const auto p = cat(sys, seq(5 + salt, salt, V())), r = seq(3, salt + 10, V());
    const Turn t = request(cache, p, r, at);
    EXPECT_EQ(t.reused, int64_t(sys.size())) << "session " << salt;
    EXPECT_TRUE(same(t.logits, fresh(*model, p, r))) << "session " << salt;
  }
  EXPECT_EQ(cache.checkpoints(), 1);
  EXPECT_GT(cache.checkpoint_bytes(), 0u);
}

TEST_P(PromptCacheTest, CheckpointsStayWithinTheirBytes) {
  const auto sys1 = seq(40, 1, V()), sys2 = seq(40, 2, V()), sys3 = seq(40, 3, V());
  uint64_t one = 0;
  {
    PromptCache probe(*model, options(1));
    request(probe, cat(sys1, seq(4, 5, V())), {}, {40});
    one = probe.checkpoint_bytes();
  }
  ASSERT_GT(one, 0u);
  PromptCache cache(*model, options(1, 0, "", "", one * 2 + one / 2));
  for (const auto& sys : {sys1, sys2, sys3}) request(cache, cat(sys, seq(4, 5, V())), {}, {40});
  EXPECT_EQ(cache.checkpoints(), 2);
  EXPECT_LE(cache.checkpoint_bytes(), one * 2 + one / 2);
  const Turn t = request(cache, cat(sys2, seq(4, 6, V())), {}, {40});
  EXPECT_EQ(t.reused, 40);
  EXPECT_TRUE(same(t.logits, fresh(*model, cat(sys2, seq(4, 6, V())), {})));
  // sys1's was the least recently used: dropped (the kept conversation is sys2's now).
  EXPECT_EQ(request(cache, cat(sys1, seq(4, 6, V())), {}, {40}).reused, 0);
  // No checkpoints at all with a zero bound.
  PromptCache none(*model, options(1, 0, "", "", 0));
  request(none, cat(sys1, seq(4, 5, V())), {}, {40});
  EXPECT_EQ(none.checkpoints(), 0);
}

TEST_P(PromptCacheTest, EvictsLeastRecentlyUsedBeyondTheBytes) {
  const auto a = seq(12, 1, V()), b = seq(12, 2, V()), c = seq(12, 3, V());
  uint64_t one = 0;
  {
    PromptCache probe(*model, options(8));
    request(probe, a, {});
    one = probe.memory_bytes();
  }
  // Room for two conversations' state, not three.
  PromptCache cache(*model, options(8, one * 2 + one / 2));
  request(cache, a, {});
  request(cache, b, {});
  EXPECT_EQ(cache.slots_in_memory(), 2);
  request(cache, c, {});  // a is the least recently used: evicted when c is kept
  request(cache, seq(4, 9, V()), {});  // keeps c
  EXPECT_LE(cache.memory_bytes(), one * 2 + one / 2);
  EXPECT_EQ(request(cache, cat(c, seq(2, 7, V())), {}).reused, int64_t(c.size()));
  EXPECT_EQ(request(cache, cat(a, seq(2, 7, V())), {}).reused, 0) << "a should have been evicted first";
}

TEST_P(PromptCacheTest, SavedStatesSurviveARestart) {
  test::TempDir tmp;
  const std::string id = "test " + std::string(GetParam());
  const auto sys = seq(40, 1, V());
  const auto p1 = cat(sys, seq(6, 2, V())), p2 = cat(sys, seq(6, 3, V())), p3 = cat(sys, seq(6, 4, V()));
  PromptCacheOptions o = options(1, 0, tmp.path(), id);
  {
    PromptCache cache(*model, o);
    request(cache, p1, seq(2, 8, V()));
    request(cache, p2, {});  // departs from p1 after sys: recurrent models save the state there
  }
  std::vector<std::string> lines;
  o.log = [&](const std::string& l) { lines.push_back(l); };
  PromptCache cache(*model, o);  // a restart
  EXPECT_GE(cache.files(), 1);
  const Turn t = request(cache, p3, {});
  EXPECT_GE(t.reused, int64_t(sys.size()));
  EXPECT_TRUE(same(t.logits, fresh(*model, p3, {})));
  const Turn r = request(cache, cat(p1, seq(3, 5, V())), {});
  EXPECT_GE(r.reused, int64_t(sys.size()));
  EXPECT_TRUE(lines.empty()) << lines.front();
}

TEST_P(PromptCacheTest, BadFilesAreIgnoredWithOneLine) {
  test::TempDir tmp;
  const std::string id = "test " + std::string(GetParam());
  const auto p = seq(30, 1, V()), longer = cat(p, seq(4, 2, V()));
  PromptCacheOptions o = options(1, 0, tmp.path(), id);
  {
    PromptCache cache(*model, o);
    request(cache, p, {});
  }
  ASSERT_EQ(std::distance(std::filesystem::directory_iterator(tmp.path()), {}), 1);
  const std::string file = std::filesystem::directory_iterator(tmp.path())->path().string();
  {  // one flipped byte in the values
    std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(-20, std::ios::end);
    char c;
    f.get(c);
    f.seekp(-20, std::ios::end);
    f.put(char(c ^ 0x40));
  }
  // A foreign file: another model's identity.
  {
    Session s(*model);
    s.feed(p);
    write_state_file(tmp.file("foreign.state"), s.image(), "another model");
  }
  std::vector<std::string> lines;
  o.log = [&](const std::string& l) { lines.push_back(l); };
  PromptCache cache(*model, o);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("foreign.state"), std::string::npos) << lines[0];
  const Turn t = request(cache, longer, {});
  EXPECT_EQ(t.reused, 0);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find(file), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("XXH3"), std::string::npos) << lines[1];
  EXPECT_TRUE(same(t.logits, fresh(*model, longer, {})));
  request(cache, longer, {});
  EXPECT_EQ(lines.size(), 2u) << "a bad file is reported once";
}

TEST_P(PromptCacheTest, FilesStayWithinTheirBound) {
  test::TempDir tmp;
  PromptCacheOptions o = options(1, 0, tmp.path(), "t");
  uint64_t one = 0;
  {
    PromptCache probe(*model, o);
    request(probe, seq(20, 1, V()), {});
    one = probe.disk_bytes();
  }
  std::filesystem::remove_all(tmp.path());
  o.disk_bytes = one * 2 + one / 2;
  PromptCache cache(*model, o);
  for (int i = 0; i < 4; ++i) request(cache, seq(20, 10 + i, V()), {});
  EXPECT_EQ(cache.files(), 2);
  EXPECT_LE(cache.disk_bytes(), o.disk_bytes);
  PromptCache again(*model, o);  // a restart: only the files
  EXPECT_EQ(again.files(), 2);
  EXPECT_EQ(request(again, cat(seq(20, 13, V()), seq(2, 1, V())), {}).reused, 19) << "the newest file is kept";
  EXPECT_EQ(request(again, cat(seq(20, 10, V()), seq(2, 1, V())), {}).reused, 0) << "the oldest was deleted";
}

INSTANTIATE_TEST_SUITE_P(Models, PromptCacheTest, ::testing::Values("qwen3_moe_tiny", "kimi_linear_tiny"));

// Issue 38, finding 6: other local users could read every cached conversation
// (the directory was created 0755, its files 0644). The directory is made 0700,
// the files 0600, and a directory of ours found with wider modes is tightened.
TEST(PromptCacheFiles, DirectoryAndFilesArePrivate) {
  namespace fs = std::filesystem;
  auto model = load_model(test::fixture("golden/qwen3_moe_tiny"));
  const int64_t V = model->info().vocab;
  test::TempDir tmp;
  const mode_t old_umask = umask(022);  // the usual one: what a plain create would give others
  auto mode = [](const std::string& p) { return fs::status(p).permissions() & fs::perms::all; };
  std::vector<std::string> lines;
  PromptCacheOptions o = options(1, 0, tmp.file("new/cache"), "t");
  o.log = [&](const std::string& l) { lines.push_back(l); };
  {
    PromptCache cache(*model, o);
    request(cache, seq(12, 1, V), {});
    ASSERT_EQ(cache.files(), 1);
  }
  EXPECT_EQ(mode(o.dir), fs::perms::owner_all);
  for (const auto& e : fs::directory_iterator(o.dir))
    EXPECT_EQ(mode(e.path().string()), fs::perms::owner_read | fs::perms::owner_write) << e.path();
  EXPECT_TRUE(lines.empty());
  // An existing directory (and file) of ours that others can read: tightened, said once.
  fs::permissions(o.dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                             fs::perms::others_exec);
  for (const auto& e : fs::directory_iterator(o.dir))
    fs::permissions(e.path(), fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  {
    PromptCache cache(*model, o);
    EXPECT_EQ(cache.files(), 1);
  }
  EXPECT_EQ(mode(o.dir), fs::perms::owner_all);
  for (const auto& e : fs::directory_iterator(o.dir))
    EXPECT_EQ(mode(e.path().string()), fs::perms::owner_read | fs::perms::owner_write) << e.path();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("0700"), std::string::npos) << lines[0];
  umask(old_umask);
}

// Issue 38, finding 5: after a model's weights changed in place (one sign
// flipped in a tensor, the file rewritten), the cache served the old state. The
// model's identity now covers each file's modification time too: the old files
// are ignored (with a line) and the reply is the new weights' own.
TEST(PromptCacheFiles, WeightsChangedInPlaceAreNotServedFromTheCache) {
  namespace fs = std::filesystem;
  test::TempDir tmp;
  const std::string dir = test::copy_golden(tmp, "qwen3_moe_tiny");
  const std::string st = dir + "/model.safetensors";
  PromptCacheOptions o = options(1, 0, tmp.file("cache"), "");
  std::vector<int32_t> prompt;
  std::string before;
  {
    auto model = load_model(dir);
    prompt = seq(30, 1, model->info().vocab);
    o.identity = before = model_identity(*model);
    PromptCache cache(*model, o);
    request(cache, prompt, {});
    ASSERT_EQ(cache.files(), 1);
  }
  // The sign of the middle element of the largest tensor (little-endian: the last byte's top bit),
  // far from the bytes the identity samples; the file is written again whole, as a tool would.
  std::string bytes;
  {
    std::ifstream f(st, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data(), 8);
  const auto header = nlohmann::json::parse(bytes.substr(8, hlen));
  uint64_t lo = 0, hi = 0;
  std::string dtype;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    const uint64_t a = t["data_offsets"][0], b = t["data_offsets"][1];
    if (b - a > hi - lo) lo = a, hi = b, dtype = t["dtype"];
  }
  const uint64_t esize = dtype == "F32" ? 4 : dtype == "BF16" || dtype == "F16" ? 2 : 1;
  const uint64_t elem = (hi - lo) / esize / 2;
  bytes[8 + hlen + lo + elem * esize + esize - 1] ^= char(0x80);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the file system's clock tick
  {
    std::ofstream f(st, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
  }
  auto model = load_model(dir);
  o.identity = model_identity(*model);
  EXPECT_NE(o.identity, before);
  std::vector<std::string> lines;
  o.log = [&](const std::string& l) { lines.push_back(l); };
  PromptCache cache(*model, o);
  EXPECT_EQ(cache.files(), 0);
  const Turn t = request(cache, cat(prompt, seq(3, 2, model->info().vocab)), {});
  EXPECT_EQ(t.reused, 0) << "the old weights' state was served";
  EXPECT_TRUE(same(t.logits, fresh(*model, cat(prompt, seq(3, 2, model->info().vocab)), {})));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("another model"), std::string::npos) << lines[0];
}

// Issue 38, finding 8: a full file system failed every save with a message and
// never made room. A write that runs out of space (here a writer that behaves as
// a file system with room for two states) deletes the least recently used files
// and is tried once more; the newest states are kept.
TEST(PromptCacheFiles, AFullDiskMakesRoomFromTheOldestFiles) {
  namespace fs = std::filesystem;
  auto model = load_model(test::fixture("golden/qwen3_moe_tiny"));
  const int64_t V = model->info().vocab;
  test::TempDir tmp;
  PromptCacheOptions o = options(1, 0, tmp.file("cache"), "t");
  uint64_t one = 0;
  {
    PromptCache probe(*model, o);
    request(probe, seq(20, 1, V), {});
    one = probe.disk_bytes();
  }
  fs::remove_all(o.dir);
  const uint64_t capacity = one * 2 + one / 2;  // the cache's own bound (8 GB) is far above it
  int full = 0;
  o.write = [&](const std::string& path, const SessionImage& image, const std::string& identity) {
    uint64_t used = 0;
    for (const auto& e : fs::directory_iterator(o.dir)) used += e.file_size();
    if (used + encode_state(image, identity).size() > capacity) {
      ++full;
      throw DiskFull(path + ".tmp: write failed: No space left on device");
    }
    write_state_file(path, image, identity);
  };
  std::vector<std::string> lines;
  o.log = [&](const std::string& l) { lines.push_back(l); };
  PromptCache cache(*model, o);
  for (int i = 0; i < 4; ++i) request(cache, seq(20, 10 + i, V), {});
  EXPECT_EQ(full, 2);  // the third and the fourth state, each saved on the second try
  EXPECT_EQ(cache.files(), 2);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("No space left on device"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("deleted 1 least recently used file"), std::string::npos) << lines[0];
  PromptCache again(*model, o);  // a restart: what is on disk
  EXPECT_EQ(again.files(), 2);
  auto reused = [&](int salt) { return again.take(cat(seq(20, salt, V), seq(2, 1, V))).session->tokens().size(); };
  EXPECT_EQ(reused(13), 19u) << "the newest state was saved";
  EXPECT_EQ(reused(12), 19u);
  EXPECT_EQ(reused(11), 0u) << "older states made room";
  EXPECT_EQ(reused(10), 0u);
}

}  // namespace
}  // namespace sluice::prompt_cache_test
