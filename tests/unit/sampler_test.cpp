// Sampling: greedy, seeded reproducibility, top-k / top-p / min-p cut-offs,
// reported log probabilities, and the veto hook.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "runtime/sampler.h"
#include "util/error.h"

namespace sluice::sampler_test {
namespace {

std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(float(std::log(p)));
  return l;
}

std::map<int32_t, int> histogram(SamplingParams p, const std::vector<float>& l, int n) {
  Sampler s(p);
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[s.sample(l.data(), int64_t(l.size())).token];
  return h;
}

TEST(Sampler, GreedyTakesArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  std::vector<float> l = {1, 3, 3, 2};
  EXPECT_EQ(s.sample(l.data(), 4).token, 1);
}

TEST(Sampler, SameSeedSameTokensOtherSeedOtherTokens) {
  auto l = logits_of({0.1, 0.2, 0.3, 0.25, 0.15});
  auto run = [&](uint64_t seed) {
    SamplingParams p;
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(l.data(), 5).token);
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Sampler, FollowsTheDistribution) {
  auto l = logits_of({0.5, 0.3, 0.2});
  auto h = histogram(SamplingParams{}, l, 20000);
  EXPECT_NEAR(h[0] / 20000.0, 0.5, 0.02);
  EXPECT_NEAR(h[1] / 20000.0, 0.3, 0.02);
  EXPECT_NEAR(h[2] / 20000.0, 0.2, 0.02);
}

TEST(Sampler, TopKTopPMinPCutTheTail) {
  auto l = logits_of({0.4, 0.3, 0.2, 0.1});
  SamplingParams k;
  k.top_k = 2;
  auto hk = histogram(k, l, 5000);
  EXPECT_EQ(hk.count(2) + hk.count(3), 0u);
  EXPECT_NEAR(hk[0] / 5000.0, 0.4 / 0.7, 0.03);

  SamplingParams tp;
  tp.top_p = 0.75;  // 0.4 + 0.3 = 0.7 < 0.75, so three tokens stay
  auto hp = histogram(tp, l, 5000);
  EXPECT_EQ(hp.count(3), 0u);
  EXPECT_GT(hp[2], 0);

  SamplingParams mp;
  mp.min_p = 0.6;  // keeps p >= 0.24: tokens 0 and 1
  auto hm = histogram(mp, l, 5000);
  EXPECT_EQ(hm.count(2) + hm.count(3), 0u);
  EXPECT_GT(hm[1], 0);
}

TEST(Sampler, LowTemperatureSharpens) {
  auto l = logits_of({0.6, 0.4});
  SamplingParams p;
  p.temperature = 0.1;
  auto h = histogram(p, l, 2000);
  EXPECT_GT(h[0], 1950);
}

TEST(Sampler, ReportsLogprobsOfTheRawDistribution) {
  auto l = logits_of({0.5, 0.25, 0.125, 0.125});
  SamplingParams p;
  p.temperature = 0;
  p.top_logprobs = 3;
  Sampler s(p);
  Sample r = s.sample(l.data(), 4);
  EXPECT_EQ(r.token, 0);
  EXPECT_NEAR(r.logprob, std::log(0.5), 1e-6);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].token, 0);
  EXPECT_EQ(r.top[1].token, 1);
  EXPECT_NEAR(r.top[1].logprob, std::log(0.25), 1e-6);
  EXPECT_EQ(r.top[2].token, 2);  // tie with 3: lower id first
}

TEST(Sampler, VetoedTokensAreNeverChosen) {
  auto l = logits_of({0.7, 0.2, 0.1});
  Sampler s(SamplingParams{});
  for (int i = 0; i < 200; ++i) EXPECT_NE(s.sample(l.data(), 3, [](int32_t t) { return t != 0; }).token, 0);
  EXPECT_THROW(s.sample(l.data(), 3, [](int32_t) { return false; }), Error);
}

TEST(Sampler, RejectsBadParameters) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.temperature = -1;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.min_p = 2;
  EXPECT_THROW(Sampler{p}, Error);
}

}  // namespace
}  // namespace sluice::sampler_test
