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
