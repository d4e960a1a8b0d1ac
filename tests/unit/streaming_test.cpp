// The streaming expert path computes bitwise the same logits as the all-in-RAM
// path, for every architecture and weight format, with caches small enough to
// force evictions; corrupt data and bad sizes are reported naming the expert.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "experts/streaming_experts.h"
#include "engine/engine.h"
#include "format/checkpoint.h"
#include "format/config.h"
#include "format/expert_index.h"
#include "io/spine_layout.h"
#include "io/spine_streamer.h"
#include "runtime/session.h"
#include "support/golden_logits.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::streaming_test {
namespace {

using test::golden_ids;
const auto run = test::prefill_half_then_decode;

class StreamingGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(StreamingGolden, BitwiseEqualToResident) {
  const std::string dir = test::fixture("golden/" + GetParam());
  auto ids = golden_ids(GetParam());
  auto resident = load_model(dir);
  auto want = run(*resident, ids);
  for (uint64_t cache : {uint64_t(200) << 10, uint64_t(6) << 20}) {
  for (const char* policy : {"lru", "lfu", "heat"}) {
    for (bool prefetch : {false, true}) {
      LoadOptions o;
      o.stream_experts = true;
      o.prefetch = prefetch;
      o.streaming.policy = policy;
      test::TempDir heat_dir;
      o.streaming.heat_file = heat_dir.file("heat.txt");
      // Room for a handful of experts only: most requests miss and evict.
      o.streaming.cache_bytes = cache;
      auto streamed = load_model(dir, o);
      auto got = run(*streamed, ids);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << policy << " prefetch=" << prefetch;
      ExpertStats st = streamed->expert_stats();
      EXPECT_GT(st.bytes_read, 0u);
      EXPECT_GT(st.misses, 0u);
      if (cache < (1u << 20)) {
        EXPECT_GT(st.evictions, 0u);
      }
      if (prefetch) {
        EXPECT_GT(st.prefetch_issued, 0u);
      }
    }
  }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, StreamingGolden,
                         ::testing::Values("deepseek_v3_tiny", "deepseek_v3_tiny_fp8", "deepseek_v3_tiny_int4",
                                           "qwen3_moe_tiny", "gpt_oss_tiny", "kimi_linear_tiny", "kimi_k3_tiny"));

TEST(Streaming, HeatPolicyLearnsAcrossRuns) {
  const std::string dir = test::fixture("golden/kimi_k3_tiny");
  auto ids = golden_ids("kimi_k3_tiny");
  test::TempDir tmp;
  LoadOptions o;
  o.stream_experts = true;
  o.streaming.cache_bytes = 64u << 10;  // a few experts
  o.streaming.policy = "heat";
  o.streaming.heat_file = tmp.file("heat.txt");
  auto want = run(*load_model(dir), ids);
  { EXPECT_EQ(run(*load_model(dir, o), ids), want); }
  std::ifstream in(o.streaming.heat_file);
  uint64_t key;
  double h, total = 0;
  int lines = 0;
  while (in >> key >> h) total += h, ++lines;
  EXPECT_GT(lines, 0);
  EXPECT_GT(total, 0.0);
  // A second run starts from the learned counts and computes the same numbers.
  EXPECT_EQ(run(*load_model(dir, o), ids), want);
}

TEST(Streaming, ThreadPoolReaderMatchesIoUring) {
  const std::string dir = test::fixture("golden/kimi_k3_tiny");
  auto ids = golden_ids("kimi_k3_tiny");
  LoadOptions a, b;
  a.stream_experts = b.stream_experts = true;
  a.streaming.cache_bytes = b.streaming.cache_bytes = 1u << 20;
  a.streaming.queue = ReadQueue::Kind::IoUring;
  b.streaming.queue = ReadQueue::Kind::Threads;
  b.streaming.direct = false;
  EXPECT_EQ(run(*load_model(dir, a), ids), run(*load_model(dir, b), ids));
}

TEST(Streaming, ChecksumMismatchNamesTheExpert) {
  const std::string dir = test::fixture("golden/qwen3_moe_tiny");
  LoadOptions o;
  o.stream_experts = true;
  o.streaming.cache_bytes = 1u << 20;
  o.streaming.checksums = {{0x1234}};  // wrong checksum for expert 0 of layer 0
  auto m = load_model(dir, o);
  Session s(*m);
  bool reported = false;
  try {
    for (int32_t t = 3; t < 40 && !reported; ++t) s.feed({t});
  } catch (const Error& e) {
    reported = true;
    EXPECT_NE(std::string(e.what()).find("expert 0 of layer 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(reported);
}

// The cache's pages are touched once in the background (reads only): it
// finishes, the logits are those of the resident model, the verification of
// every loaded expert is still done and timed apart from the stall; off, it
// never runs.
TEST(Streaming, PrefaultTouchesTheCacheWithoutChangingBits) {
  const std::string dir = test::fixture("golden/qwen3_moe_tiny");
  auto ids = golden_ids("qwen3_moe_tiny");
  auto want = run(*load_model(dir), ids);
  for (bool prefault : {true, false}) {
    LoadOptions o;
    o.stream_experts = true;
    o.streaming.cache_bytes = 1u << 20;
    o.streaming.prefault = prefault;
    auto m = load_model(dir, o);
    const StreamingExperts* se = m->streaming_experts();
    ASSERT_NE(se, nullptr);
    for (int i = 0; i < 1000 && prefault && !se->prefault_done(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(se->prefault_done(), prefault);
    EXPECT_EQ(se->prefault_seconds() > 0, prefault);
    auto got = run(*m, ids);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "prefault=" << prefault;
  }
  // With the cache touched, a load is still verified before use: a wrong
  // checksum is caught, and the check is counted and timed.
  LoadOptions o;
  o.stream_experts = true;
  o.streaming.cache_bytes = 1u << 20;
  o.streaming.checksums = {{0x1234}};
  auto m = load_model(dir, o);
  while (!m->streaming_experts()->prefault_done()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  Session s(*m);
  EXPECT_THROW(
      for (int32_t t = 3; t < 40; ++t) s.feed({t}), Error);
  EXPECT_GE(m->expert_stats().verified, 1u);
  EXPECT_GT(m->expert_stats().verify_seconds, 0.0);
}

// A cache larger than the whole pool holds one slot per expert, no more: the arena (populated
// at start-up) is never bigger than what the experts can use.
TEST(Streaming, CacheNeverHasMoreSlotsThanExperts) {
  const std::string dir = test::fixture("golden/qwen3_moe_tiny");
  auto probe = load_model(dir);
  int64_t experts = 0;
  for (int32_t l = 0; l < probe->experts().layers(); ++l) experts += probe->experts().experts(l);
  ASSERT_GT(experts, 2);
  LoadOptions o;
  o.stream_experts = true;
  o.streaming.cache_bytes = 1ull << 30;  // far more than the pool
  auto m = load_model(dir, o);
  const StreamingExperts* se = m->streaming_experts();
  ASSERT_NE(se, nullptr);
  EXPECT_EQ(se->slots(), experts);
  EXPECT_LT(se->host_arena().bytes, uint64_t(o.streaming.cache_bytes));
  o.streaming.cache_bytes = se->host_arena().bytes / uint64_t(experts) * 2;  // two slots: the cap does not bind
  EXPECT_EQ(load_model(dir, o)->streaming_experts()->slots(), 2);
}

}  // namespace
}  // namespace sluice::streaming_test

namespace sluice::streaming_test {
namespace {

// Chunked prefill of a 128-token prompt (the whole context): every expert is read at most once per
// chunk and layer, and the chunked result equals the one-pass result.
TEST(Streaming, ChunkedPrefillReadsEachExpertOncePerChunk) {
  const std::string dir = test::fixture("golden/deepseek_v3_tiny");
  std::vector<int32_t> prompt;
  for (int i = 0; i < 128; ++i) prompt.push_back(3 + (i * 37) % 1000);
  LoadOptions o;
  o.stream_experts = true;
  o.streaming.cache_bytes = 4ull << 20;  // one layer's 32 experts (~100 KB each) fit, not all three layers
  auto m = load_model(dir, o);
  Session s(*m);
  s.set_prefill_chunk(32);
  s.set_prefill_span(0);  // chunk by chunk: the reads this counts are per chunk
  auto chunked = s.feed(prompt);
  ExpertStats st = m->expert_stats();
  EXPECT_EQ(st.duplicate_loads, 0u);
  EXPECT_GT(st.evictions, 0u);
  // Loads can never exceed chunks x MoE layers x experts; with 32 tokens x top-4 of 32
  // experts nearly every expert is used in every chunk, so the bound is nearly tight.
  EXPECT_LE(st.reads_submitted, 4u * 3u * 32u);
  EXPECT_GT(st.reads_submitted, 0u);

  auto resident = load_model(dir);
  Session r(*resident);
  r.set_prefill_chunk(0);
  auto whole = r.feed(prompt);
  for (size_t i = 0; i < whole.size(); ++i) ASSERT_NEAR(chunked[i], whole[i], 1e-4 * (1 + std::abs(whole[i])));
}

}  // namespace
}  // namespace sluice::streaming_test

namespace sluice::streaming_test {
namespace {

// A spine larger than its budget is streamed layer by layer (O_DIRECT reads
// into the weights' own addresses, dropped after use): same logits, bit for bit.
// Budgets: the least streaming works in (every layer streamed) and a little
// less than the spine it holds (the embedding table is on demand), where some
// layers stay resident.
TEST(SpineStreaming, BitwiseEqualToResident) {
  for (const char* name : {"kimi_k3_tiny", "deepseek_v3_tiny_fp8", "gpt_oss_tiny"}) {
    const std::string dir = test::fixture(std::string("golden/") + name);
    auto ids = golden_ids(name);
    auto want = run(*load_model(dir), ids);
    const ModelFootprint f = load_model(dir)->footprint(0);
    const uint64_t held = f.spine_bytes - f.spine_on_demand_bytes;
    for (uint64_t budget : {f.spine_stream_min_bytes, held - held / 20}) {
      LoadOptions o;
      o.stream_experts = true;
      o.streaming.cache_bytes = 1u << 20;
      o.spine_budget = budget;
      auto m = load_model(dir, o);
      EXPECT_EQ(run(*m, ids), want) << name << " budget " << budget;
      SpineStreamStats st = m->spine_stats();
      EXPECT_GT(st.streamed_layers, 0) << name;
      EXPECT_GT(st.bytes_read, 0u) << name;
    }
  }
}

// A golden fixture's checkpoint, expert index and spine layout, and its layer count.
struct SpineOf {
  explicit SpineOf(const std::string& dir)
      : ck(dir), index(Config::load(dir), ck), layout(ck, index.spine()), n(layout.max_layer() + 1) {}
  const Checkpoint ck;
  const ExpertIndex index;
  const SpineLayout layout;
  const int64_t n;
};

// A streamed layer reads and drops only pages its own spine bytes fill: a page
// it shares with another layer, the embedding table or an expert is resident,
// so no read or drop lands under another layer's compute. Every spine byte is
// in its layer's pages or the resident ones. (The tiny models interleave the
// layers' small f32 tensors within a few pages.)
TEST(SpineStreaming, AStreamedPageHoldsOnlyItsLayersBytes) {
  for (const char* name : {"kimi_k3_tiny", "deepseek_v3_tiny_fp8", "gpt_oss_tiny"}) {
    SCOPED_TRACE(name);
    const SpineOf spine(test::fixture(std::string("golden/") + name));
    // Plain references, not a structured binding: clang before 16 cannot
    // capture a binding in the lambdas below.
    const Checkpoint& ck = spine.ck;
    const ExpertIndex& index = spine.index;
    const SpineLayout& layout = spine.layout;
    const int64_t n = spine.n;
    const TensorView embed = ck.get(index.layout().prefix + "model.embed_tokens.weight");
    const ExpertExtent on_demand{ck.file_index(index.layout().prefix + "model.embed_tokens.weight"),
                                 embed.file_offset, embed.nbytes()};
    const auto ranges = SpineStreamer::ranges_of(layout, n, {on_demand});
    ASSERT_EQ(ranges.size(), size_t(n) + 1);
    // Bytes of [a, b) in file f covered by layer l's extents.
    auto covered = [&](int64_t l, int32_t f, uint64_t a, uint64_t b) {
      uint64_t c = 0;
      for (const auto& e : layout.layer_extents(l))
        if (const uint64_t lo = std::max(a, e.offset), hi = std::min(b, e.offset + e.length); e.file == f && hi > lo)
          c += hi - lo;
      return c;
    };
    // In the pages of layer l's ranges (or the resident ones: l = n).
    auto in_pages = [&](int64_t l, int32_t f, uint64_t at) {
      for (const auto& r : ranges[size_t(l)])
        if (r.file == f && at >= r.offset && at < r.offset + r.length) return true;
      return false;
    };
    int64_t streamed_pages = 0;
    for (int64_t l = 0; l < n; ++l) {
      for (const auto& r : ranges[size_t(l)]) {
        ASSERT_EQ(r.offset % 4096, 0u);
        ASSERT_EQ(r.length % 4096, 0u);
        for (uint64_t p = r.offset; p < r.offset + r.length; p += 4096, ++streamed_pages)
          EXPECT_EQ(covered(l, r.file, p, p + 4096), 4096u) << "layer " << l << " page at " << p;
      }
      for (const auto& e : layout.layer_extents(l))
        for (uint64_t at = e.offset; at < e.offset + e.length; at += 64) {
          const bool lazy = e.file == on_demand.file && at >= on_demand.offset &&
                            at < on_demand.offset + on_demand.length;
          EXPECT_TRUE(lazy || in_pages(l, e.file, at) || in_pages(n, e.file, at))
              << "layer " << l << " byte " << at << " is in no pages read";
        }
    }
    EXPECT_GT(streamed_pages, 0);
  }
}

// The spine's pages are read with O_DIRECT into the checkpoint's private file mapping; they are
// made anonymous first, so a read's first write is a zero fill, not a copy-on-write fault that reads
// the page through the page cache and copies it (the bytes read twice). After loading, every
// resident range lies in anonymous memory (no file in /proc/self/maps) and holds the file's bytes.
TEST(SpineStreaming, ResidentPagesAreAnonymousAndHoldTheFilesBytes) {
  // The mapping (/proc/self/maps) that holds address a: its inode and path ("" for anonymous memory).
  auto mapping_of = [](uintptr_t a) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
      unsigned long lo = 0, hi = 0, inode = 0;
      char path[512] = {0};
      if (std::sscanf(line.c_str(), "%lx-%lx %*s %*s %*s %lu %511s", &lo, &hi, &inode, path) < 3) continue;
      if (a >= lo && a < hi) return std::make_pair(inode, std::string(path));
    }
    return std::make_pair(~0ul, std::string("(unmapped)"));
  };
  for (const char* name : {"kimi_k3_tiny", "deepseek_v3_tiny_fp8"}) {
    SCOPED_TRACE(name);
    const SpineOf spine(test::fixture(std::string("golden/") + name));
    // Plain references, not a structured binding: clang before 16 cannot
    // capture a binding in the lambdas below.
    const Checkpoint& ck = spine.ck;
    const SpineLayout& layout = spine.layout;
    const int64_t n = spine.n;
    const auto ranges = SpineStreamer::ranges_of(layout, n, {});
    const SpineStreamer streamer(ck, layout, n, ~0ull >> 1, {});
    ASSERT_EQ(streamer.stats().streamed_layers, 0);
    const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
    int64_t checked = 0;
    for (const auto& layer : ranges)
      for (const auto& r : layer) {
        const uint64_t a = (r.offset + page - 1) / page * page, b = (r.offset + r.length) / page * page;
        if (a >= b) continue;
        const uint8_t* base = ck.files()[size_t(r.file)]->map_base();
        const auto [inode, path] = mapping_of(reinterpret_cast<uintptr_t>(base + a));
        EXPECT_EQ(inode, 0ul) << "offset " << a << " of " << ck.files()[size_t(r.file)]->path() << " is mapped from "
                              << path;
        // The file's bytes (the last page may run past its end: zeros there, as the file mapping had).
        const std::string& file = ck.files()[size_t(r.file)]->path();
        const uint64_t size = std::filesystem::file_size(file);
        std::vector<char> want(size_t(b - a), 0);
        std::ifstream f(file, std::ios::binary);
        f.seekg(std::streamoff(a));
        ASSERT_TRUE(f.read(want.data(), std::streamsize(std::min(b, size) - a)));
        EXPECT_EQ(0, std::memcmp(want.data(), base + a, want.size())) << "offset " << a;
        ++checked;
      }
    EXPECT_GT(checked, 0);
  }
}

// A budget that holds the spine (less the on-demand embedding table) keeps
// every layer resident, however little is left for read-ahead; one that holds
// only the head and the largest layer streams them all, with no read-ahead.
TEST(SpineStreaming, KeepsEveryLayerResidentWhenTheyFit) {
  const std::string dir = test::fixture("golden/kimi_k3_tiny");
  const ModelFootprint f = load_model(dir)->footprint(0);
  ASSERT_GT(f.spine_on_demand_bytes, 0u);
  auto open = [&](uint64_t budget) {
    LoadOptions o;
    o.stream_experts = true;
    o.streaming.cache_bytes = 1u << 20;
    o.spine_budget = budget;
    return load_model(dir, o);
  };
  const SpineStreamStats least = open(f.spine_stream_min_bytes)->spine_stats();
  EXPECT_EQ(least.resident_layers, 0);
  EXPECT_EQ(least.window, 0);
  EXPECT_LE(least.held_bytes, f.spine_bytes - f.spine_on_demand_bytes + 64 * 4096);  // page rounding
  auto m = open(least.held_bytes);
  const SpineStreamStats all = m->spine_stats();
  EXPECT_EQ(all.streamed_layers, 0);
  EXPECT_EQ(all.resident_layers, m->info().n_layers);
  EXPECT_EQ(all.resident_bytes, all.held_bytes);
}

}  // namespace
}  // namespace sluice::streaming_test

namespace sluice::streaming_test {
namespace {

// A request for more distinct experts than the cache holds counts every one of
// them: those that found no free slot are misses too (they load at acquire).
TEST(Streaming, RequestCountsEveryExpertWhenTheCacheIsFull) {
  const std::string dir = test::fixture("golden/deepseek_v3_tiny");
  auto probe = load_model(dir);
  int32_t layer = -1;
  for (int32_t l = 0; l < probe->experts().layers() && layer < 0; ++l)
    if (probe->experts().experts(l) >= 8) layer = l;
  ASSERT_GE(layer, 0) << "no layer with 8 routed experts";
  // An expert's bytes as read (each extent rounded out to 4 KiB for O_DIRECT).
  uint64_t expert_bytes = 0;
  for (const ExpertExtent& x : expert_extents(probe->checkpoint(), probe->experts().at(layer, 0)))
    expert_bytes += x.length + 2 * 4096;
  ASSERT_GT(expert_bytes, 0u);
  LoadOptions o;
  o.stream_experts = true;
  o.streaming.cache_bytes = expert_bytes * 2;  // room for one or two experts of the eight
  auto m = load_model(dir, o);
  ExpertSource& src = m->expert_source();
  const std::vector<int32_t> experts = {0, 1, 2, 3, 4, 5, 6, 7};
  src.request(layer, experts.data(), int64_t(experts.size()));
  ExpertStats st = src.stats();
  EXPECT_EQ(st.hits + st.misses, experts.size());
  EXPECT_EQ(st.misses, experts.size());
  EXPECT_LT(st.reads_submitted, experts.size()) << "the cache should have had room for only some of them";
  for (int32_t e : experts) {  // each still loads when used
    src.acquire(layer, e);
    src.release(layer, e);
  }
  EXPECT_EQ(m->expert_stats().requests, experts.size());
}

}  // namespace
}  // namespace sluice::streaming_test

#include <xxhash.h>

#include <cstring>

#include <algorithm>
#include <random>
#include <set>

#include "experts/routing_log.h"

namespace sluice::streaming_test {
namespace {

// XXH3-64 of each routed expert's bytes in extent order (what `prepare` records).
std::vector<std::vector<uint64_t>> expert_checksums(const Engine& m) {
  ExpertTable& t = const_cast<Engine&>(m).experts();
  std::vector<std::vector<uint64_t>> out(size_t(t.layers()));
  for (int32_t l = 0; l < t.layers(); ++l)
    for (int32_t e = 0; e < t.experts(l); ++e) {
      XXH3_state_t* st = XXH3_createState();
      XXH3_64bits_reset(st);
      for (const ExpertExtent& x : expert_extents(m.checkpoint(), t.at(l, e)))
        XXH3_64bits_update(st, m.checkpoint().files()[size_t(x.file)]->map_base() + x.offset, x.length);
      out[size_t(l)].push_back(XXH3_64bits_digest(st));
      XXH3_freeState(st);
    }
  return out;
}

// An expert is verified while its reads land (page-sized reads, completed in
// any order by the thread-pool reader): with the right checksums the logits are
// the resident model's; one flipped byte in the middle of an expert, in a read
// that is neither its first nor its last, is caught before the expert is used,
// naming it.
TEST(Streaming, VerifiedWhileReadsLandAndCorruptionIsCaughtBeforeUse) {
  const std::string name = "qwen3_moe_tiny";
  test::TempDir tmp;
  const std::string dir = test::copy_golden(tmp, name);
  auto ids = golden_ids(name);
  auto resident = load_model(dir);
  const auto want = run(*resident, ids);
  const std::vector<std::vector<uint64_t>> sums = expert_checksums(*resident);
  // The expert the first decode step of layer `layer` asks for first.
  RoutingLog log;
  {
    auto probe = load_model(dir);
    probe->set_expert_source(std::make_unique<RecordingExperts>(probe->experts(), log));
    Session s(*probe);
    s.feed({ids[0]});
  }
  ASSERT_FALSE(log.steps.empty());
  const int32_t layer = log.steps.front().first, victim = log.steps.front().second.front();
  auto extents = expert_extents(resident->checkpoint(), resident->experts().at(layer, victim));
  ASSERT_FALSE(extents.empty());
  const ExpertExtent big = *std::max_element(extents.begin(), extents.end(),
                                             [](const auto& a, const auto& b) { return a.length < b.length; });
  ASSERT_GT(big.length, 3u * 4096) << "the expert must span several page-sized reads";
  const std::string file = resident->checkpoint().files()[size_t(big.file)]->path();
  const uint64_t at = big.offset + big.length / 2;
  resident.reset();

  for (bool corrupt : {false, true}) {
    if (corrupt) {
      std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(std::streamoff(at));
      char c = 0;
      f.read(&c, 1);
      c = char(c ^ 0x10);
      f.seekp(std::streamoff(at));
      f.write(&c, 1);
    }
    LoadOptions o;
    o.stream_experts = true;
    o.streaming.cache_bytes = 1u << 20;
    o.streaming.chunk_bytes = 4096;  // many reads per expert
    o.streaming.queue = ReadQueue::Kind::Threads;
    o.streaming.direct = false;
    o.streaming.checksums = sums;
    auto m = load_model(dir, o);
    if (!corrupt) {
      EXPECT_EQ(run(*m, ids), want);
      EXPECT_GT(m->expert_stats().verified, 0u);
      continue;
    }
    Session s(*m);
    try {
      s.feed({ids[0]});
      ADD_FAILURE() << "the corrupt expert was used";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(fmt::format("expert {} of layer {}", victim, layer)), std::string::npos) << what;
      EXPECT_NE(what.find("checksum"), std::string::npos) << what;
    }
  }
}

// Experts arriving in any order: the MoE block computes whatever is ready
// first (in varying groups), and the weighted sum in expert-id order keeps the
// logits bitwise those of the resident model.
class ScrambledArrival : public ExpertSource {
 public:
  ScrambledArrival(ExpertSource& inner, uint32_t seed) : inner_(inner), rng_(seed) {}
  void request(int32_t layer, const int32_t* e, int64_t n) override {
    arrival_.assign(e, e + n);
    std::shuffle(arrival_.begin(), arrival_.end(), rng_);
    arrived_ = 0;
    last_ = -1;
    inner_.request(layer, e, n);
  }
  // Each poll lets the next expert of the shuffled order arrive, sometimes none.
  bool ready(int32_t, int32_t e) override {
    if (arrived_ < arrival_.size() && rng_() % 3 != 0) ++arrived_;
    return std::find(arrival_.begin(), arrival_.begin() + long(arrived_), e) != arrival_.begin() + long(arrived_);
  }
  const ExpertWeights& acquire(int32_t l, int32_t e) override {
    unordered_ |= e < last_;  // acquired after a higher id of the same request
    last_ = e;
    return inner_.acquire(l, e);
  }
  void release(int32_t l, int32_t e) override { inner_.release(l, e); }
  ExpertStats stats() const override { return inner_.stats(); }
  bool unordered_ = false;  // some request's experts were acquired out of id order

 private:
  ExpertSource& inner_;
  std::mt19937 rng_;
  std::vector<int32_t> arrival_;
  size_t arrived_ = 0;
  int32_t last_ = -1;
};

TEST(Streaming, OutOfOrderArrivalGivesIdenticalLogits) {
  for (const std::string name : {"deepseek_v3_tiny_int4", "kimi_k3_tiny", "gpt_oss_tiny"}) {
    const std::string dir = test::fixture("golden/" + name);
    auto ids = golden_ids(name);
    auto m = load_model(dir);
    const auto want = run(*m, ids);
    for (uint32_t seed : {1u, 2u, 3u}) {
      auto src = std::make_unique<ScrambledArrival>(m->experts(), seed);
      ScrambledArrival* scrambled = src.get();
      m->set_expert_source(std::move(src));
      EXPECT_EQ(run(*m, ids), want) << name << " seed " << seed;
      // The arrival order did change the order of computation.
      EXPECT_TRUE(scrambled->unordered_) << name;
      m->set_expert_source(nullptr);
    }
  }
}

}  // namespace
}  // namespace sluice::streaming_test

namespace sluice::streaming_test {
namespace {

// Bytes of an expert as a source serves it equal those of the checkpoint.
bool same_bytes(const ExpertWeights& got, const ExpertWeights& want) {
  const auto a = expert_byte_ranges(got), b = expert_byte_ranges(want);
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].len != b[i].len || std::memcmp(a[i].ptr, b[i].ptr, a[i].len) != 0) return false;
  return true;
}

int32_t first_moe_layer(Engine& m, int32_t min_experts) {
  for (int32_t l = 0; l < m.experts().layers(); ++l)
    if (m.experts().experts(l) >= min_experts) return l;
  return -1;
}

// Guessed reads wait behind a window; when the router has run, the guesses it
// did not choose stop reading (their unsubmitted reads are dropped), the one it
// chose and the real miss are read in full, and a dropped guess asked for
// later still arrives with its own bytes.
TEST(Streaming, UnchosenGuessesStopReadingAndChosenOnesArrive) {
  const std::string dir = test::fixture("golden/deepseek_v3_tiny");
  auto resident = load_model(dir);
  const int32_t layer = first_moe_layer(*resident, 8);
  ASSERT_GE(layer, 0);
  LoadOptions o;
  o.stream_experts = true;
  o.streaming.cache_bytes = 8u << 20;  // room for every expert of the layer
  o.streaming.chunk_bytes = 4096;      // many reads per expert
  o.streaming.prefetch_window_reads = 1;
  o.streaming.queue = ReadQueue::Kind::Threads;
  o.streaming.direct = false;
  o.streaming.checksums = expert_checksums(*resident);
  auto m = load_model(dir, o);
  StreamingExperts* se = const_cast<StreamingExperts*>(m->streaming_experts());
  ASSERT_NE(se, nullptr);
  uint64_t expert_read_bytes = 0;
  for (const ExpertExtent& x : expert_extents(resident->checkpoint(), resident->experts().at(layer, 0)))
    expert_read_bytes += x.length;
  ASSERT_GT(expert_read_bytes, 4u * 4096) << "an expert must take several reads";

  const std::vector<int32_t> guess = {0, 1, 2, 3}, chosen = {1, 5};
  se->prefetch(layer, guess.data(), int64_t(guess.size()));
  se->request(layer, chosen.data(), int64_t(chosen.size()));
  // A dropped guess needed at once after all (no request): its dropped reads
  // are submitted again (or, if its reads in flight ended, it is read anew).
  EXPECT_TRUE(same_bytes(se->acquire(layer, 2), resident->experts().at(layer, 2)));
  se->release(layer, 2);
  for (int32_t e : chosen) {
    EXPECT_TRUE(same_bytes(se->acquire(layer, e), resident->experts().at(layer, e))) << "expert " << e;
    se->release(layer, e);
  }
  const LayerPrefetchStats g = se->prefetch_by_layer()[size_t(layer)];
  EXPECT_EQ(g.guessed, 4u);
  EXPECT_EQ(g.right, 1u);
  EXPECT_EQ(g.issued, 4u);
  EXPECT_EQ(g.cancelled, 3u);
  // Three whole experts and a little: the other two dropped guesses stopped early.
  EXPECT_LT(se->stats().bytes_read, 4 * expert_read_bytes);
  // Later, the same once more (by then the dropped guess's reads have ended).
  EXPECT_TRUE(same_bytes(se->acquire(layer, 0), resident->experts().at(layer, 0)));
  se->release(layer, 0);
}

// A layer whose guesses keep missing stops being read (the guesses are still
// scored); with the gate off (precision 0) every guess is read.
TEST(Streaming, WrongGuessesOfALayerStopBeingRead) {
  const std::string dir = test::fixture("golden/deepseek_v3_tiny");
  auto probe = load_model(dir);
  const int32_t layer = first_moe_layer(*probe, 8);
  ASSERT_GE(layer, 0);
  for (double min_precision : {0.5, 0.0}) {
    LoadOptions o;
    o.stream_experts = true;
    o.streaming.cache_bytes = 512u << 10;  // a few experts: a guess is not cached when it comes back
    o.streaming.prefetch_min_precision = min_precision;
    auto m = load_model(dir, o);
    StreamingExperts* se = const_cast<StreamingExperts*>(m->streaming_experts());
    for (int i = 0; i < 20; ++i) {
      const int32_t wrong[2] = {int32_t(2 * (i % 3)), int32_t(2 * (i % 3) + 1)}, right = 7;
      se->prefetch(layer, wrong, 2);
      se->request(layer, &right, 1);
      se->acquire(layer, right);
      se->release(layer, right);
    }
    const LayerPrefetchStats g = se->prefetch_by_layer()[size_t(layer)];
    EXPECT_GE(g.guessed, 16u);
    EXPECT_EQ(g.right, 0u);
    if (min_precision > 0) {
      EXPECT_LE(g.issued, 10u) << "guesses read after the warm-up";
      EXPECT_GE(g.skipped, g.guessed - 10);
    } else {
      EXPECT_EQ(g.skipped, 0u);
      EXPECT_GT(g.issued, 20u);  // all read but those that found the small cache busy
    }
  }
}

// The tiny DeepSeek-V3 golden model with its experts streamed into a cache that holds them all.
std::unique_ptr<Engine> streamed_tiny() {
  LoadOptions o;
  o.stream_experts = true;
  o.streaming.cache_bytes = 64u << 20;
  return load_model(test::fixture("golden/deepseek_v3_tiny"), o);
}

// A hit says whether the expert had been read already or was still being read: experts read and
// released are ready hits when asked for again.
TEST(Streaming, HitsSayWhetherTheExpertWasReadAlready) {
  auto m = streamed_tiny();
  ExpertSource& src = m->expert_source();
  const int32_t layer = first_moe_layer(*m, 4);
  ASSERT_GE(layer, 0);
  const std::vector<int32_t> experts = {0, 1, 2, 3};
  src.request(layer, experts.data(), int64_t(experts.size()));
  EXPECT_EQ(src.stats().misses, experts.size());
  EXPECT_EQ(src.stats().ready_hits, 0u);
  for (int32_t e : experts) {
    src.acquire(layer, e);
    src.release(layer, e);
  }
  src.request(layer, experts.data(), int64_t(experts.size()));
  EXPECT_EQ(src.stats().hits, experts.size());
  EXPECT_EQ(src.stats().ready_hits, experts.size());
}

// What the drive delivers while acquire() waits is counted (bench's read rate while stalled): an
// expert loaded at acquire, its completions handed back a reap late (the reorder fault), is
// waited for; the share of its reads' time in flight that overlapped the wait counts, never more
// than was read; cached experts add nothing.
TEST(Streaming, WaitsCountTheBytesThatLandDuringThem) {
  setenv("SLUICE_READ_FAULTS", "reorder,seed=3", 1);
  struct Unset {
    ~Unset() { unsetenv("SLUICE_READ_FAULTS"); }
  } unset;
  auto m = streamed_tiny();
  ExpertSource& src = m->expert_source();
  const int32_t layer = first_moe_layer(*m, 4);
  ASSERT_GE(layer, 0);
  for (int32_t e = 0; e < 4; ++e) {  // not requested first: each read starts at acquire and is waited for
    src.acquire(layer, e);
    src.release(layer, e);
  }
  const ExpertStats st = src.stats();
  EXPECT_GT(st.stall_seconds, 0.0);
  EXPECT_GT(st.bytes_landed_while_stalled, 0u);
  EXPECT_LE(st.bytes_landed_while_stalled, st.bytes_read);
  for (int32_t e = 0; e < 4; ++e) {  // cached now: no wait, nothing lands
    src.acquire(layer, e);
    src.release(layer, e);
  }
  EXPECT_EQ(src.stats().bytes_landed_while_stalled, st.bytes_landed_while_stalled);
  EXPECT_EQ(src.stats().bytes_read, st.bytes_read);
}

}  // namespace
}  // namespace sluice::streaming_test
