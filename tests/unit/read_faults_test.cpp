// The read queue under injected faults (short completions, -EINTR/-EAGAIN once,
// out-of-order completion, -EIO): every read still returns the file's bytes, or
// an error; streamed experts and streamed spine layers give bitwise the same
// logits, and an -EIO is reported naming the expert.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

#include "io/read_faults.h"
#include "io/read_queue.h"
#include "engine/engine.h"
#include "model/model.h"
#include "runtime/session.h"
#include "support/golden_logits.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::read_faults_test {
namespace {

// SLUICE_READ_FAULTS for the lifetime of the object.
class FaultsInEnvironment {
 public:
  explicit FaultsInEnvironment(const std::string& spec) { setenv("SLUICE_READ_FAULTS", spec.c_str(), 1); }
  ~FaultsInEnvironment() { unsetenv("SLUICE_READ_FAULTS"); }
};

TEST(ReadFaults, ParseNamesBadItems) {
  const ReadFaults f = ReadFaults::parse("short=0.25,retry=0.5,reorder,eio=0.01,seed=9");
  EXPECT_EQ(f.short_rate, 0.25);
  EXPECT_EQ(f.retry_rate, 0.5);
  EXPECT_TRUE(f.reorder);
  EXPECT_EQ(f.eio_rate, 0.01);
  EXPECT_EQ(f.seed, 9u);
  EXPECT_FALSE(ReadFaults::parse("").any());
  for (const char* bad : {"short=2", "retry=x", "bogus", "seed=-1", "eio"}) {
    try {
      ReadFaults::parse(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

// A file of pseudo-random bytes; reads at 4 KiB-aligned offsets of it.
struct TestFile {
  test::TempDir dir;
  std::string path = dir.file("data.bin");
  std::vector<uint8_t> bytes;
  explicit TestFile(size_t n) : bytes(n) {
    std::mt19937 rng(5);
    for (auto& b : bytes) b = uint8_t(rng());
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(n));
  }
};

struct Aligned {
  uint8_t* p;
  explicit Aligned(size_t n) : p(static_cast<uint8_t*>(std::aligned_alloc(kDirectAlign, n))) {}
  ~Aligned() { std::free(p); }
};

// Reads every 64 KiB block of the file (the last one past its end) through a queue.
std::vector<ReadCompletion> read_all(ReadQueue& q, const TestFile& f, int fd, uint8_t* buf, size_t block) {
  const size_t n = (f.bytes.size() + block - 1) / block;
  for (size_t i = 0; i < n; ++i) q.submit({fd, i * block, uint32_t(block), buf + i * block, i});
  q.flush();
  std::vector<ReadCompletion> done;
  while (q.in_flight() > 0) q.reap(done, true);
  return done;
}

TEST(ReadFaults, QueuesReturnWholeReadsUnderFaults) {
  const size_t block = 64 << 10;
  TestFile f(40 * block + 12345);  // the last read ends past the end of the file
  for (auto kind : {ReadQueue::Kind::IoUring, ReadQueue::Kind::Threads}) {
    for (bool direct : {true, false}) {
      FaultsInEnvironment env("short=0.5,retry=0.5,reorder,seed=3");
      const int64_t injected = FaultInjector::injected_in_process();
      bool is_direct = false;
      const int fd = open_for_reads(f.path, direct, &is_direct);
      auto q = ReadQueue::create(kind, 8);
      Aligned buf(41 * block);
      auto done = read_all(*q, f, fd, buf.p, block);
      close(fd);
      SCOPED_TRACE(q->name() + (is_direct ? " O_DIRECT" : " buffered"));
      EXPECT_GT(FaultInjector::injected_in_process() - injected, 20);
      ASSERT_EQ(done.size(), 41u);
      std::vector<bool> seen(41);
      bool out_of_order = false;
      for (size_t i = 0; i < done.size(); ++i) {
        const auto& c = done[i];
        out_of_order |= c.tag != i;
        ASSERT_LT(c.tag, 41u);
        EXPECT_FALSE(seen[c.tag]);
        seen[c.tag] = true;
        EXPECT_EQ(c.result, c.tag < 40 ? int64_t(block) : 12345) << "read " << c.tag;
      }
      EXPECT_TRUE(out_of_order);
      EXPECT_EQ(std::memcmp(buf.p, f.bytes.data(), f.bytes.size()), 0);
    }
  }
}

TEST(ReadFaults, EioIsReportedNotRetriedForever) {
  TestFile f(8 << 20);
  FaultsInEnvironment env("eio=1");
  bool direct = false;
  const int fd = open_for_reads(f.path, true, &direct);
  auto q = ReadQueue::create(ReadQueue::Kind::Auto, 8);
  Aligned buf(8 << 20);
  auto done = read_all(*q, f, fd, buf.p, 1 << 20);
  close(fd);
  ASSERT_EQ(done.size(), 8u);
  for (const auto& c : done) EXPECT_EQ(c.result, -EIO);
}

using test::golden_ids;
const auto run = test::prefill_half_then_decode;

// Streamed experts (both queues) and a streamed spine under short reads,
// retries and reordering: bitwise the logits of the resident model.
TEST(ReadFaults, StreamingGivesTheSameLogitsUnderFaults) {
  for (const std::string name : {"deepseek_v3_tiny_fp8", "gpt_oss_tiny", "kimi_k3_tiny"}) {
    const std::string dir = test::fixture("golden/" + name);
    const auto ids = golden_ids(name);
    const auto want = run(*load_model(dir), ids);
    const uint64_t spine = load_model(dir)->spine_bytes();
    for (auto kind : {ReadQueue::Kind::IoUring, ReadQueue::Kind::Threads}) {
      for (bool stream_spine : {false, true}) {
        SCOPED_TRACE(name + (kind == ReadQueue::Kind::Threads ? " threads" : " io_uring") +
                     (stream_spine ? " spine streamed" : ""));
        FaultsInEnvironment env("short=0.4,retry=0.3,reorder,seed=" + std::to_string(ids.size()));
        const int64_t injected = FaultInjector::injected_in_process();
        LoadOptions o;
        o.stream_experts = true;
        o.streaming.cache_bytes = 256u << 10;
        o.streaming.queue = kind;
        if (stream_spine) o.spine_budget = spine / 2;
        auto m = load_model(dir, o);
        EXPECT_EQ(run(*m, ids), want);
        EXPECT_GT(FaultInjector::injected_in_process() - injected, 10);
        if (stream_spine) {
          EXPECT_GT(m->spine_stats().streamed_layers, 0);
        }
      }
    }
  }
}

// -EIO on some reads (which ones depends on the seed): loading or decoding stops
// with an error naming the expert or the spine layer it was reading.
TEST(ReadFaults, EioNamesWhatWasBeingRead) {
  const std::string dir = test::fixture("golden/qwen3_moe_tiny");
  int expert_errors = 0;
  for (int seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE(seed);
    FaultsInEnvironment env("eio=0.1,seed=" + std::to_string(seed));
    try {
      LoadOptions o;
      o.stream_experts = true;
      o.streaming.cache_bytes = 256u << 10;
      auto m = load_model(dir, o);
      Session s(*m);
      for (int32_t t = 3; t < 40; ++t) s.feed({t});
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string w = e.what();
      EXPECT_NE(w.find("Input/output error"), std::string::npos) << w;
      const bool expert = w.find("read error for expert") != std::string::npos && w.find("of layer") != std::string::npos;
      EXPECT_TRUE(expert || w.find("spine read of layer") != std::string::npos ||
                  w.find("spine read of the resident part") != std::string::npos)
          << w;
      expert_errors += expert;
    }
  }
  EXPECT_GT(expert_errors, 0);
}

}  // namespace
}  // namespace sluice::read_faults_test
