// `sluice synth --routing realistic`: a small Kimi-K2-shaped model (96 experts,
// top-8) decoded greedily for 100 tokens through the benchmark routes like the
// published Kimi K3 measurements (previous-token overlap ~31%, hottest 30% of
// experts ~86% of picks) within the stated bands (the default random router
// gives a hot share near 70% here, below the band); and Qwen3-MoE, which has
// no score-correction bias, is refused by name.
#include <gtest/gtest.h>

#include "bench/benchmark.h"
#include "store/synthetic.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice {
namespace {

nlohmann::json decode_routing(const std::string& routing, const test::TempDir& tmp) {
  SynthOptions o;
  o.arch = "kimi_k2";
  o.experts = 96, o.top_k = 8, o.layers = 4;
  o.routing = routing;
  o.progress = false;
  o.out_dir = tmp.file(routing);
  synthesize(o);
  BenchRequest r;
  r.model = o.out_dir;
  r.mem.ram_gib = 1;
  r.tokens = 100;
  return run_benchmark(r).json["routing"];
}

TEST(SyntheticRouting, RealisticRoutingMatchesPublishedStatistics) {
  test::TempDir tmp;
  const nlohmann::json real = decode_routing("realistic", tmp);
  const nlohmann::json rand = decode_routing("random", tmp);
  EXPECT_EQ(real["tokens"].get<int64_t>(), 100);
  const double overlap = real["prev_token_overlap"], hot = real["hottest_30pct_share"];
  EXPECT_GE(overlap, 0.22) << real.dump();
  EXPECT_LE(overlap, 0.40) << real.dump();
  EXPECT_GE(hot, 0.78) << real.dump();
  EXPECT_LE(hot, 0.93) << real.dump();
  EXPECT_LT(rand["hottest_30pct_share"].get<double>(), 0.78) << rand.dump();
}

TEST(SyntheticRouting, NeedsAScoreCorrectionBias) {
  test::TempDir tmp;
  SynthOptions o;
  o.arch = "qwen3_moe";
  o.routing = "realistic";
  o.progress = false;
  o.out_dir = tmp.file("q");
  EXPECT_THROW(synthesize(o), Error);
  o.routing = "sometimes";
  EXPECT_THROW(synthesize(o), Error);
}

}  // namespace
}  // namespace sluice
