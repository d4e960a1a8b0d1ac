// sluice bench as a library call: every mode returns JSON whose numbers agree
// with each other, progress is reported, and bad requests name the option.
#include <gtest/gtest.h>

#include "engine/benchmark.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice {
namespace {

BenchRequest request() {
  BenchRequest r;
  r.model = test::fixture("golden/deepseek_v3_tiny");
  r.mem.ram_gib = 0.02;
  r.tokens = 4;
  r.prompt_tokens = 6;
  return r;
}

TEST(Benchmark, DecodeMeasuresEveryToken) {
  int progress = 0;
  const BenchResult res = run_benchmark(request(), [&](const std::string&) { ++progress; });
  const auto& j = res.json;
  EXPECT_GT(progress, 0);
  ASSERT_EQ(res.summary.size(), 1u);
  EXPECT_NE(res.summary[0].find("s/token"), std::string::npos) << res.summary[0];
  EXPECT_EQ(j["per_token"].size(), 4u);
  EXPECT_EQ(j["prompt_tokens"].get<int64_t>(), 6);
  EXPECT_EQ(j["ram_bytes"].get<uint64_t>(), uint64_t(0.02 * double(1ull << 30)));
  EXPECT_GT(j["cache_bytes"].get<uint64_t>(), 0u);
  EXPECT_GT(j["seconds_per_token"].get<double>(), 0.0);
  EXPECT_GE(j["cache_hit_rate"].get<double>(), 0.0);
  EXPECT_LE(j["cache_hit_rate"].get<double>(), 1.0);
  double needed = 0;
  for (const auto& t : j["per_token"]) needed += t["expert_bytes_needed"].get<double>();
  EXPECT_GT(needed, 0.0);
  EXPECT_NE(j["plan"].get<std::string>().find("expert cache"), std::string::npos);
}

// Prefill counts: the bytes of the distinct experts the prompt routed to,
// which a one-pass prefill reads (plus O_DIRECT alignment) and no more.
TEST(Benchmark, PrefillReadsTheDistinctRoutedExperts) {
  BenchRequest r = request();
  r.prompt_tokens = 100;
  const auto& j = run_benchmark(r).json;
  const auto distinct = j["prefill_distinct_expert_bytes"].get<uint64_t>();
  const auto read = j["prefill_expert_bytes_read"].get<uint64_t>();
  EXPECT_GT(distinct, 0u);
  EXPECT_GE(read, distinct);
  EXPECT_LT(double(read), 1.5 * double(distinct));
  EXPECT_GE(j["prefill_chunk"].get<int64_t>(), 100);
  // Waiting for reads is part of the prefill's time, never more than all of it.
  EXPECT_GE(j["prefill_stall_seconds"].get<double>(), 0.0);
  EXPECT_LE(j["prefill_stall_seconds"].get<double>(), j["prefill_seconds"].get<double>());
}

// --batch B: B sequences per pass; tokens counted over all of them.
TEST(Benchmark, BatchedDecodeCountsEverySequence) {
  BenchRequest r = request();
  r.batch = 3;
  const BenchResult res = run_benchmark(r);
  const auto& j = res.json;
  EXPECT_EQ(j["batch"].get<int64_t>(), 3);
  EXPECT_EQ(j["per_pass"].size(), 4u);
  EXPECT_EQ(j["prompt_tokens"].get<int64_t>(), 18);
  EXPECT_GT(j["aggregate_tokens_per_second"].get<double>(), 0.0);
  double secs = 0, needed = 0;
  for (const auto& p : j["per_pass"]) secs += p["seconds"].get<double>(), needed += p["expert_bytes_needed"].get<double>();
  EXPECT_NEAR(j["aggregate_tokens_per_second"].get<double>(), 12 / secs, 1e-6 * 12 / secs);
  EXPECT_NEAR(j["expert_bytes_needed_per_token"].get<double>(), needed / 12, 1e-6 * needed);
  EXPECT_EQ(j["memory_plan"]["state_sequences"].get<int64_t>(), 3);
  EXPECT_GE(j["prefill_stall_seconds"].get<double>(), 0.0);
  EXPECT_LE(j["prefill_stall_seconds"].get<double>(), j["prefill_seconds"].get<double>());
  EXPECT_NE(res.summary[0].find("batch 3"), std::string::npos) << res.summary[0];
  r.generate = true;
  EXPECT_THROW(run_benchmark(r), Error);
}

TEST(Benchmark, IoOnlyReadsExperts) {
  BenchRequest r = request();
  r.io_only = true;
  const BenchResult res = run_benchmark(r);
  EXPECT_TRUE(res.json["io_only"].get<bool>());
  EXPECT_GT(res.json["expert_bytes_read"].get<uint64_t>(), 0u);
}

TEST(Benchmark, ReplayedDraftsCompareWithPlain) {
  BenchRequest r = request();
  r.replay_wrong_every = 0;  // every draft right
  const BenchResult res = run_benchmark(r);
  EXPECT_EQ(res.summary.size(), 3u);
  EXPECT_EQ(res.json["plain"]["tokens"], res.json["speculative"]["tokens"]);
  EXPECT_GT(res.json["speculative"]["accepted"].get<int64_t>(), 0);
  EXPECT_LT(res.json["speculative"]["forward_passes"].get<int64_t>(), res.json["plain"]["forward_passes"].get<int64_t>());
}

TEST(Benchmark, BadRequestsNameTheOption) {
  BenchRequest r = request();
  r.mem.ram_gib = 0;
  EXPECT_THROW(run_benchmark(r), Error);
  r = request();
  r.tokens = 0;
  try {
    run_benchmark(r);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tokens"), std::string::npos);
  }
}

}  // namespace
}  // namespace sluice
