// Routing variants and rotary embeddings against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "format/config.h"
#include "model/rope.h"
#include "model/router.h"
#include "util/error.h"

namespace sluice::router_rope_test {
namespace {

TEST(Router, SigmoidBiasSelectsButDoesNotWeigh) {
  RouterSpec s;
  s.scoring = RouterSpec::SigmoidBiased;
  s.n_experts = 4;
  s.top_k = 2;
  s.renormalize = true;
  s.scaling = 2.0f;
  float bias[4] = {0, 0, 10, 0};  // forces expert 2 in despite a low score
  s.selection_bias = bias;
  float logits[4] = {3, 2, -3, 1};
  int32_t ids[2];
  float w[2];
  route(s, logits, ids, w);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 0);
  const double s2 = 1 / (1 + std::exp(3.0)), s0 = 1 / (1 + std::exp(-3.0));
  EXPECT_NEAR(w[0], 2 * s2 / (s2 + s0), 1e-6);
  EXPECT_NEAR(w[1], 2 * s0 / (s2 + s0), 1e-6);
}

TEST(Router, GroupLimitedSelectionKeepsBestGroups) {
  RouterSpec s;
  s.scoring = RouterSpec::SigmoidBiased;
  s.n_experts = 8;
  s.top_k = 2;
  s.n_group = 4;
  s.topk_group = 1;
  // Group 1 (experts 2,3) has the best top-2 sum although expert 6 alone is the best.
  float logits[8] = {0, 0, 2, 2, 0, 0, 3, -5};
  int32_t ids[2];
  float w[2];
  route(s, logits, ids, w);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 3);
}

TEST(Router, SoftmaxVariants) {
  float logits[3] = {1, 2, 3};
  int32_t ids[2];
  float w[2];
  RouterSpec q;
  q.scoring = RouterSpec::SoftmaxAll;
  q.n_experts = 3;
  q.top_k = 2;
  q.renormalize = false;
  route(q, logits, ids, w);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_EQ(ids[0], 2);
  EXPECT_NEAR(w[0], std::exp(3.0) / z, 1e-6);
  q.scoring = RouterSpec::TopkSoftmax;
  route(q, logits, ids, w);
  EXPECT_NEAR(w[0], std::exp(3.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
  EXPECT_NEAR(w[0] + w[1], 1.0, 1e-6);
}

TEST(Router, TiesGoToTheLowerIndex) {
  RouterSpec s;
  s.scoring = RouterSpec::TopkSoftmax;
  s.n_experts = 4;
  s.top_k = 1;
  float logits[4] = {1, 5, 5, 5};
  int32_t id;
  float w;
  route(s, logits, &id, &w);
  EXPECT_EQ(id, 1);
}

TEST(Rope, YarnFrequenciesForKimiK2) {
  // formats.md 1.7: Kimi-K2 keeps inv_freq[0..19], divides inv_freq[20..31] by 32.
  Config c(nlohmann::json::parse(R"({"rope_theta":50000.0,"max_position_embeddings":131072,
    "rope_scaling":{"type":"yarn","factor":32.0,"beta_fast":1.0,"beta_slow":1.0,"mscale":1.0,
    "mscale_all_dim":1.0,"original_max_position_embeddings":4096}})"), "test");
  Rope r = rope_from_config(c, 64, true);
  EXPECT_NEAR(r.inv_freq[19], 1.62176e-3, 1e-8);
  EXPECT_NEAR(r.inv_freq[20], 3.61405e-5, 1e-10);
  EXPECT_DOUBLE_EQ(r.attention_factor, 1.0);
  EXPECT_NEAR(yarn_get_mscale(32.0, 1.0), 1.3465736, 1e-7);
}

TEST(Rope, InterleavedAndHalfRotationsAreRotations) {
  Config c(nlohmann::json::parse(R"({"rope_theta":10000.0})"), "test");
  for (bool inter : {true, false}) {
    Rope r = rope_from_config(c, 8, inter);
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    r.apply(x, 3);
    double n = 0;
    for (float v : x) n += double(v) * v;
    EXPECT_NEAR(n, 204.0, 1e-3);  // norm preserved
    // pair (0, 1) for interleaved, (0, 4) for halves, rotated by 3 rad at i = 0
    const int j = inter ? 1 : 4;
    const float x0 = 1, x1 = inter ? 2 : 5;
    EXPECT_NEAR(x[0], x0 * std::cos(3.0) - x1 * std::sin(3.0), 1e-5);
    EXPECT_NEAR(x[j], x1 * std::cos(3.0) + x0 * std::sin(3.0), 1e-5);
  }
}

TEST(Config, MissingFieldIsNamed) {
  Config c(nlohmann::json::parse(R"({"a":1,"b":"x"})"), "dir/config.json");
  try {
    c.req_int("hidden_size");
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("'hidden_size'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("dir/config.json"), std::string::npos);
  }
  EXPECT_THROW(c.req_int("b"), std::exception);
}

// eos_token_id as configs write it: one id or a list; anything else is an error naming the field.
TEST(Config, TokenIdsAreOneOrAList) {
  Config c(nlohmann::json::parse(R"({"one": 7, "list": [1, 2], "neg": -1, "big": 4294967296, "frac": 2.5,
                                     "in_list": [1, "x"]})"),
           "dir/config.json");
  EXPECT_EQ(c.get_token_ids("one"), (std::vector<int32_t>{7}));
  EXPECT_EQ(c.get_token_ids("list"), (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(c.get_token_ids("absent").empty());
  for (const char* bad : {"neg", "big", "frac", "in_list"}) {
    try {
      c.get_token_ids(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("dir/config.json: field '") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace sluice::router_rope_test
