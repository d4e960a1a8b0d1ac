// sluice bench as a library call: every mode returns JSON whose numbers agree
// with each other, progress is reported, and bad requests name the option.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <vector>

#include <fmt/format.h>

#include "bench/benchmark.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::benchmark_test {
namespace {

BenchRequest request() {
  BenchRequest r;
  r.model = test::fixture("golden/deepseek_v3_tiny");
  r.mem.ram_gib = 0.02;
  r.tokens = 4;
  r.prompt_tokens = 6;
  r.probe_seconds = 0.1;
  return r;
}

TEST(Benchmark, DecodeMeasuresEveryToken) {
  int progress = 0;
  const BenchResult res = run_benchmark(request(), [&](const std::string&) { ++progress; });
  const auto& j = res.json;
  EXPECT_GT(progress, 0);
  // The decode, how each layer's next-layer guesses did, then the routing statistics of the routes taken.
  ASSERT_EQ(res.summary.size(), 3u);
  EXPECT_NE(res.summary[0].find("s/token"), std::string::npos) << res.summary[0];
  EXPECT_NE(res.summary[1].find("next-layer guesses right"), std::string::npos) << res.summary[1];
  EXPECT_NE(res.summary[2].find("previous-token overlap"), std::string::npos) << res.summary[2];
  ASSERT_FALSE(j["prefetch_by_layer"].empty()) << j.dump();
  for (const auto& g : j["prefetch_by_layer"]) EXPECT_LE(g["right"].get<uint64_t>(), g["guessed"].get<uint64_t>()) << g.dump();
  EXPECT_TRUE(j["routing"].contains("prev_token_overlap")) << j.dump();
  EXPECT_EQ(j["per_token"].size(), 4u);
  EXPECT_EQ(j["prompt_tokens"].get<int64_t>(), 6);
  EXPECT_EQ(j["ram_bytes"].get<uint64_t>(), uint64_t(0.02 * double(1ull << 30)));
  EXPECT_GT(j["cache_bytes"].get<uint64_t>(), 0u);
  EXPECT_GT(j["seconds_per_token"].get<double>(), 0.0);
  EXPECT_GE(j["cache_hit_rate"].get<double>(), 0.0);
  EXPECT_LE(j["cache_hit_rate"].get<double>(), 1.0);
  EXPECT_GE(j["cache_ready_rate"].get<double>(), 0.0);
  EXPECT_LE(j["cache_ready_rate"].get<double>(), j["cache_hit_rate"].get<double>());
  double needed = 0;
  for (const auto& t : j["per_token"]) needed += t["expert_bytes_needed"].get<double>();
  EXPECT_GT(needed, 0.0);
  EXPECT_NE(j["plan"].get<std::string>().find("expert cache"), std::string::npos);
}

// The headline is what a user waiting for the tokens gets: the decode's wall
// time over its tokens (the mean), then the per-token spread, the stall, the
// bytes read per token and how the stalled reads compare with the drive.
TEST(Benchmark, DecodeLeadsWithTheMeanOverTheGeneration) {
  BenchRequest r = request();
  r.tokens = 7;
  r.probe_seconds = 0.2;
  const BenchResult res = run_benchmark(r);
  const auto& j = res.json;
  std::vector<double> secs;
  double total = 0, bytes = 0, stall = 0;
  for (const auto& t : j["per_token"]) {
    secs.push_back(t["seconds"].get<double>());
    total += secs.back();
    bytes += t["expert_bytes_read"].get<double>() + t["spine_bytes_read"].get<double>();
    stall += t["stall_seconds"].get<double>();
  }
  ASSERT_EQ(secs.size(), 7u);
  std::sort(secs.begin(), secs.end());
  EXPECT_NEAR(j["tokens_per_second"].get<double>(), 7 / total, 1e-9 * 7 / total);
  EXPECT_NEAR(j["seconds_per_token"].get<double>(), total / 7, 1e-12);
  EXPECT_DOUBLE_EQ(j["seconds_per_token_median"].get<double>(), secs[3]);
  EXPECT_DOUBLE_EQ(j["seconds_per_token_p90"].get<double>(), secs[6]);  // nearest rank: ceil(0.9 * 7) = 7
  EXPECT_DOUBLE_EQ(j["seconds_per_token_max"].get<double>(), secs[6]);
  EXPECT_NEAR(j["bytes_read_per_token"].get<double>(), bytes / 7, 1e-9 * bytes);
  EXPECT_NEAR(j["io_stall_fraction"].get<double>(), stall / total, 1e-9);
  EXPECT_NEAR(j["compute_seconds_per_token"].get<double>(), (total - stall) / 7, 1e-9);
  // The probe read the model's own files: a rate, the floor from it, the ratio against it.
  const double drive = j["drive_gbps"].get<double>();
  EXPECT_GT(drive, 0.0);
  EXPECT_NEAR(j["io_floor_seconds_per_token"].get<double>(), bytes / 7 / (drive * 1e9), 1e-9);
  const double floor = j["floor_seconds_per_token"].get<double>();
  EXPECT_NEAR(floor, j["io_floor_seconds_per_token"].get<double>() + (total - stall) / 7, 1e-9);
  EXPECT_NEAR(j["floor_ratio"].get<double>(), total / 7 / floor, 1e-9);
  EXPECT_NEAR(j["stalled_read_vs_drive"].get<double>(), j["read_gbps_while_stalled"].get<double>() / drive, 1e-9);
  // The summary line leads with the mean rate.
  ASSERT_FALSE(res.summary.empty());
  const std::string want = fmt::format("{:.3f} tokens/s mean over 7 tokens", 7 / total);
  EXPECT_NE(res.summary[0].find(want), std::string::npos) << res.summary[0];
  EXPECT_LT(res.summary[0].find("tokens/s mean"), res.summary[0].find("median")) << res.summary[0];
  // No probe: no drive rate, no floor, and the decode's own fields unchanged.
  r.probe_seconds = 0;
  const auto& k = run_benchmark(r).json;
  EXPECT_EQ(k["drive_gbps"].get<double>(), 0.0);
  EXPECT_EQ(k["floor_ratio"].get<double>(), 0.0);
  EXPECT_GT(k["tokens_per_second"].get<double>(), 0.0);
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
  EXPECT_EQ(j["prefill_device_bytes_copied"].get<uint64_t>(), 0u) << "nothing is copied to a GPU on the CPU";
  EXPECT_GE(std::max(j["prefill_chunk"].get<int64_t>(), j["prefill_span"].get<int64_t>()), 100);
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
  // Per pass: the time in the routed experts (a part of the pass), none in an exchange (one process),
  // and each MoE layer's routes (3 layers of 32 experts, top-4: 12 rows a layer over distinct experts).
  double routed = 0;
  for (const auto& p : j["per_pass"]) {
    EXPECT_GT(p["routed_expert_seconds"].get<double>(), 0.0) << p.dump();
    EXPECT_LT(p["routed_expert_seconds"].get<double>(), p["seconds"].get<double>()) << p.dump();
    EXPECT_EQ(p["exchange_seconds"].get<double>(), 0.0);
    routed += p["routed_expert_seconds"].get<double>();
    ASSERT_EQ(p["routes"].size(), 3u) << p.dump();
    for (size_t l = 0; l < 3; ++l) {
      const auto& route = p["routes"][l];
      EXPECT_EQ(route["layer"].get<int32_t>(), int32_t(l) + 1);
      const auto experts = route["experts"].get<std::vector<int32_t>>();
      const auto rows = route["rows"].get<std::vector<int64_t>>();
      ASSERT_EQ(experts.size(), rows.size());
      EXPECT_TRUE(std::is_sorted(experts.begin(), experts.end()) &&
                  std::adjacent_find(experts.begin(), experts.end()) == experts.end());
      EXPECT_TRUE(experts.front() >= 0 && experts.back() < 32) << route.dump();
      int64_t n = 0;
      for (const int64_t x : rows) {
        EXPECT_TRUE(x >= 1 && x <= 3) << route.dump();
        n += x;
      }
      EXPECT_EQ(n, 12) << route.dump();
    }
  }
  EXPECT_NEAR(j["routed_expert_seconds_per_pass"].get<double>(), routed / 4, 1e-9);
  EXPECT_EQ(j["exchange_seconds_per_pass"].get<double>(), 0.0);
  EXPECT_FALSE(j.contains("ranks"));
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

// --draft-model: plain, then the draft model; one with another tokenizer (the
// shipped model for a golden model without tokenizer files) drafts through text.
TEST(Benchmark, DraftModelComparesWithPlain) {
  BenchRequest r = request();
  r.model = test::fixture("golden/qwen3_moe_tiny");
  r.tokens = 12;
  r.no_draft_gate = true;
  for (bool other : {true, false}) {
    r.draft_model = other ? test::fixture("../../models/sluice-k3-mini") : test::fixture("golden/gpt_oss_tiny");
    const BenchResult res = run_benchmark(r);
    ASSERT_EQ(res.summary.size(), 3u);
    EXPECT_NE(res.summary[2].find(other ? "another tokenizer" : "same tokenizer"), std::string::npos) << res.summary[2];
    EXPECT_EQ(res.json["speculative"]["through_text"].get<bool>(), other);
    EXPECT_EQ(res.json["plain"]["tokens"], res.json["speculative"]["tokens"]);
    EXPECT_GT(res.json["speculative"]["proposed"].get<int64_t>(), 0);
  }
  r.replay_wrong_every = 0;
  EXPECT_THROW(run_benchmark(r), Error);
}

// --trace: the decode's timeline as trace-event JSON, with a span per token,
// MoE compute per layer, and a completed read for every read issued.
TEST(Benchmark, DecodeTraceHasTokensComputeAndReads) {
  BenchRequest r = request();
  test::TempDir dir;
  r.trace = dir.file("trace.json");
  run_benchmark(r);
  std::ifstream in(r.trace);
  ASSERT_TRUE(in) << r.trace;
  const auto j = nlohmann::json::parse(in);
  int tokens = 0, compute = 0, begun = 0, ended = 0;
  for (const auto& e : j["traceEvents"]) {
    const std::string cat = e["cat"], ph = e["ph"];
    if (cat == "token") ++tokens;
    if (cat == "compute") {
      ++compute;
      EXPECT_GE(e["dur"].get<double>(), 0.0);
    }
    if (ph == "b") ++begun;
    if (ph == "e") ++ended;
  }
  EXPECT_EQ(tokens, 4);
  EXPECT_GE(compute, 4);
  EXPECT_GT(begun, 0);  // the tiny cache misses during decode
  EXPECT_LE(ended, begun);
  EXPECT_GE(ended, begun - 64);  // reads still in flight at the end (prefetches) may not have ended
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
}  // namespace sluice::benchmark_test
