// `sluice synth --routing realistic`: a small Kimi-K2-shaped model (96 experts,
// top-8) decoded greedily for 100 tokens through the benchmark routes like the
// published Kimi K3 measurements (previous-token overlap ~31%, hottest 30% of
// experts ~86% of picks, next layer predictable ~50%) within the stated bands
// (the default random router gives a hot share near 70% here, below the band);
// popularity is a router logit spread over each layer's experts (the zero
// harmonic of the topic coordinates); the matrices that add
// to the residual stream leave the topic coordinates at zero; and Qwen3-MoE,
// which has no score-correction bias, is refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench/benchmark.h"
#include "format/checkpoint.h"
#include "store/synthetic_routing.h"
#include "store/synthetic.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::synthetic_routing_test {
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
  const double next = real["next_layer_predictable"];
  EXPECT_GE(overlap, 0.22) << real.dump();
  EXPECT_LE(overlap, 0.40) << real.dump();
  EXPECT_GE(hot, 0.78) << real.dump();
  EXPECT_LE(hot, 0.93) << real.dump();
  EXPECT_GE(next, 0.35) << real.dump();
  EXPECT_LE(next, 0.65) << real.dump();
  EXPECT_LT(rand["hottest_30pct_share"].get<double>(), 0.78) << rand.dump();
}

// Whether the first `rows` rows of a tensor hold only `zero` bytes (a whole number of bytes per row).
bool leading_rows_are(const TensorView& t, int64_t rows, uint8_t zero) {
  const uint64_t row_bytes = t.nbytes() / uint64_t(t.shape()[0]);
  for (uint64_t i = 0; i < uint64_t(rows) * row_bytes; ++i)
    if (t.data[i] != zero) return false;
  return true;
}

// At real widths random attention writes a slowly changing context average into the topic
// coordinates, and greedy decoding settled on one token, every step routed alike (80%
// previous-token overlap at Kimi K2's widths). The residual writers' topic rows are zero,
// in every storage format; the rows past them and the readers (q_a_proj) stay random.
TEST(SyntheticRouting, ResidualWritersLeaveTheTopicAlone) {
  test::TempDir tmp;
  for (const std::string format : {"bf16", "int4", "fp8"}) {
    SynthOptions o;
    o.arch = "kimi_k2";
    o.experts = 96, o.top_k = 8, o.layers = 2;
    o.expert_format = format;
    o.routing = "realistic";
    o.progress = false;
    o.out_dir = tmp.file(format);
    synthesize(o);
    Checkpoint ck(o.out_dir);
    const nlohmann::json cfg = nlohmann::json::parse(std::ifstream(o.out_dir + "/config.json"));
    const int64_t dims = RoutingStructure(o.realistic, o.seed, cfg["hidden_size"], 96, 8).dims();
    // bf16 zero is 0x00 0x00; INT4 level 8 packs as 0x88; e4m3 zero is 0x00.
    const uint8_t zero = format == "int4" ? 0x88 : 0;
    const std::string expert_down =
        "model.layers.1.mlp.experts.5.down_proj." + std::string(format == "int4" ? "weight_packed" : "weight");
    for (const std::string& name : {std::string("model.layers.0.self_attn.o_proj.weight"),
                                   std::string("model.layers.0.mlp.down_proj.weight"),
                                   std::string("model.layers.1.mlp.shared_experts.down_proj.weight"), expert_down}) {
      SCOPED_TRACE(format + " " + name);
      const TensorView t = ck.get(name);
      const uint8_t z = name == expert_down ? zero : 0;
      EXPECT_TRUE(leading_rows_are(t, dims, z));
      EXPECT_FALSE(leading_rows_are(t, dims + 1, z));
    }
    EXPECT_FALSE(leading_rows_are(ck.get("model.layers.0.self_attn.q_a_proj.weight"), 1, 0));
  }
}

// Popularity is one router logit per expert spread over the layer (~popularity x a standard normal
// at 48 experts per pick, every expert its own value), the same for the same seed and layer, carried
// by the router rows' constant coordinate against the embeddings' (the zero harmonic), so that it
// scales with the topic's strength; the score-correction bias stays 0.
TEST(SyntheticRouting, PopularityIsSpreadOverTheExperts) {
  RealisticRouting p;
  auto pops = [&](uint64_t seed, const std::string& layer, int64_t experts) {
    RoutingStructure r(p, seed, 7168, experts, 8);
    r.begin(RoutingRole::Router, "model.layers." + layer + ".mlp.gate.weight");
    std::vector<double> b;
    for (int64_t e = 0; e < experts; ++e) {
      b.push_back(r.popularity(e));
      EXPECT_EQ(r.bias(e), 0.0);
    }
    return b;
  };
  const std::vector<double> b = pops(7, "3", 384);
  EXPECT_EQ(b, pops(7, "3", 384));
  EXPECT_NE(b, pops(8, "3", 384));
  EXPECT_NE(b, pops(7, "4", 384));
  auto spread = [](const std::vector<double>& v) {
    double mean = 0, sq = 0;
    for (double x : v) mean += x / double(v.size()), sq += x * x / double(v.size());
    EXPECT_NEAR(mean, 0.0, 1e-9);
    return std::sqrt(sq - mean * mean);
  };
  std::vector<double> sorted = b;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());
  EXPECT_NEAR(spread(b), p.popularity, 0.1 * p.popularity);
  // 12 experts per pick: a wider spread, by (12 / 48)^-0.3.
  EXPECT_NEAR(spread(pops(7, "3", 96)) / spread(b), std::pow(0.25, -0.3), 0.1);

  // The router row's constant coordinate holds the popularity less the sharpness, the embedding's
  // the amplitude, lm_head's nothing: a router logit of popularity - sharpness + the topic bump.
  RoutingStructure r(p, 7, 7168, 384, 8);
  const int64_t c = r.dims() - 1;
  r.begin(RoutingRole::Router, "model.layers.3.mlp.gate.weight");
  const double scale = r.value(0, c) / (r.popularity(0) - p.sharpness);
  EXPECT_GT(scale, 0.0);
  for (int64_t e = 0; e < 384; ++e) EXPECT_NEAR(r.value(e, c), (r.popularity(e) - p.sharpness) * scale, 1e-9);
  r.begin(RoutingRole::Embedding, "model.embed_tokens.weight");
  EXPECT_EQ(r.value(0, c), p.amplitude);
  EXPECT_EQ(r.value(77, c), p.amplitude);
  r.begin(RoutingRole::LmHead, "lm_head.weight");
  EXPECT_EQ(r.value(5, c), 0.0);
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
}  // namespace sluice::synthetic_routing_test
