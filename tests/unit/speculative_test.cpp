// Speculative decoding is token-identical to plain greedy decoding on every
// golden architecture, whatever the drafts: perfect, partly wrong, always
// wrong, or n-gram guesses; rollback is exact across KV caches, KDA recurrent
// state and sliding windows.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/engine.h"
#include "runtime/model_drafter.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "support/plain_decoding.h"
#include "support/test_device.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::speculative_test {
namespace {

class Speculation : public ::testing::TestWithParam<std::string> {};

TEST_P(Speculation, TokenIdenticalToGreedyForAnyDrafts) {
  auto model = load_model(test::fixture("golden/" + GetParam()), test::on_test_device());
  const int64_t V = model->info().vocab;
  auto ref = test::read_i64(test::fixture("golden/" + GetParam() + "/reference.safetensors"), "input_ids");
  std::vector<int32_t> prompt(ref.begin(), ref.begin() + 10);
  const int64_t n = 40;  // well past gpt-oss's 8-token sliding window
  auto plain = std::make_unique<Session>(*model);
  auto want = generate_greedy(*plain, prompt, n, /*ignore_eos=*/true);
  std::vector<int32_t> truth = prompt;
  truth.insert(truth.end(), want.begin(), want.end());

  struct Case {
    const char* label;
    int64_t wrong_every;
  } cases[] = {{"perfect drafts", 0}, {"every 3rd draft wrong", 3}, {"every draft wrong", 1}};
  // Each case drafting at every step (every verification path taken), then
  // under the gate (which may draft rarely: its decisions follow this machine's timings).
  for (bool gated : {false, true})
    for (const auto& c : cases) {
      const std::string label = std::string(c.label) + (gated ? ", gated" : ", drafting at every step");
      ReplayDrafter d(truth, c.wrong_every, V);
      Session s(*model);
      SpeculationStats st;
      SpeculationOptions o;
      o.adaptive = gated;
      auto got = generate_speculative(s, prompt, n, true, d, o, &st);
      EXPECT_EQ(got, want) << label;
      EXPECT_EQ(st.generated, n);
      EXPECT_GT(st.proposed + st.watched, 0) << label;
      if (!gated) {
        if (c.wrong_every == 0) {
          EXPECT_EQ(st.accepted, st.proposed) << label;
          EXPECT_LT(st.passes, n / 3) << label;
        } else {
          EXPECT_LT(st.accepted, st.proposed) << label;
        }
      }
      if (c.wrong_every == 1) {
        EXPECT_EQ(st.accepted, 0) << label;
      }
      // Both sessions hold a prefix of the same text; completed to the full text
      // and continued, they give identical logits.
      for (Session* x : {&s, plain.get()}) {
        const auto& fed = x->tokens();
        ASSERT_TRUE(std::equal(fed.begin(), fed.end(), truth.begin())) << label;
        if (fed.size() < truth.size()) x->feed(std::vector<int32_t>(truth.begin() + long(fed.size()), truth.end()));
      }
      std::vector<float> la = s.feed({7});
      EXPECT_EQ(la, plain->feed({7})) << label;
      plain = std::make_unique<Session>(*model);
      generate_greedy(*plain, prompt, n, true);
    }
  // n-gram drafts on a prompt that repeats itself.
  std::vector<int32_t> rep;
  for (int r = 0; r < 4; ++r) rep.insert(rep.end(), prompt.begin(), prompt.begin() + 6);
  Session p2(*model), s2(*model);
  auto want2 = generate_greedy(p2, rep, 24, true);
  for (bool gated : {false, true}) {
    NgramDrafter ng(4, 1);
    SpeculationStats st2;
    SpeculationOptions o;
    o.adaptive = gated;
    Session s3(*model);
    EXPECT_EQ(generate_speculative(gated ? s2 : s3, rep, 24, true, ng, o, &st2), want2) << (gated ? "gated" : "ungated");
  }
  // (Whether n-gram guesses occur here depends on the random model; drafting itself is tested below.)
}

INSTANTIATE_TEST_SUITE_P(Models, Speculation,
                         ::testing::Values("deepseek_v3_tiny", "deepseek_v3_tiny_fp8", "deepseek_v3_tiny_int4",
                                           "qwen3_moe_tiny", "gpt_oss_tiny", "kimi_linear_tiny", "kimi_k3_tiny"));

TEST(Rollback, RestoresStateBitForBit) {
  for (const char* name : {"kimi_linear_tiny", "gpt_oss_tiny", "deepseek_v3_tiny"}) {
    auto model = load_model(test::fixture(std::string("golden/") + name), test::on_test_device());
    std::vector<int32_t> prefix = {5, 17, 9, 33, 41}, guess = {100, 200, 300, 400, 500}, tail = {7, 8, 9};
    Session a(*model), b(*model);
    a.feed(prefix);
    a.checkpoint();
    a.feed_all(guess);
    a.rollback(2);
    std::vector<float> la = a.feed_all(tail);
    std::vector<int32_t> straight = prefix;
    straight.insert(straight.end(), guess.begin(), guess.begin() + 2);
    b.feed(straight);
    std::vector<float> lb = b.feed_all(tail);
    EXPECT_EQ(la, lb) << name;
    EXPECT_EQ(a.tokens().size(), b.tokens().size());
  }
}

TEST(NgramDrafter, ProposesWhatFollowedTheLongestRecentMatch) {
  NgramDrafter d(3, 1);
  std::vector<int32_t> h = {1, 2, 3, 4, 5, 9, 2, 3, 4, 6, 1, 2, 3};
  // suffix "1 2 3" occurred at the start, followed by 4 5 9
  EXPECT_EQ(d.propose(h, 3), (std::vector<int32_t>{4, 5, 9}));
  EXPECT_TRUE(d.propose({1, 2, 3}, 4).empty());
}

}  // namespace
}  // namespace sluice::speculative_test

namespace sluice::speculative_test {
namespace {

std::vector<int32_t> sample_speculatively(Session& s, const std::vector<int32_t>& prompt, int64_t n,
                                          const SamplingParams& p, Drafter& d, SpeculationStats* st,
                                          bool gated = true) {
  Sampler sampler(p);
  const int64_t V = s.model().info().vocab;
  auto pick = [&](float* logits) { return sampler.sample(logits, V).token; };
  SpeculationOptions o;
  o.adaptive = gated;
  return generate(s, prompt, n, /*ignore_eos=*/true, pick, &d, o, st);
}

// A position's logits are the same bits whether its token was fed alone or in
// a batch: that is what lets sampled speculation reproduce plain sampling.
TEST_P(Speculation, BatchedLogitsEqualOneTokenAtATime) {
  auto model = load_model(test::fixture("golden/" + GetParam()), test::on_test_device());
  const int64_t V = model->info().vocab;
  auto ref = test::read_i64(test::fixture("golden/" + GetParam() + "/reference.safetensors"), "input_ids");
  std::vector<int32_t> prefix(ref.begin(), ref.begin() + 10), batch(ref.begin() + 10, ref.begin() + 16);
  Session a(*model), b(*model);
  a.feed(prefix);
  b.feed(prefix);
  std::vector<float> all = a.feed_all(batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    const std::vector<float>& one = b.feed({batch[i]});
    EXPECT_TRUE(std::equal(one.begin(), one.end(), all.begin() + long(i) * V)) << "position " << i;
  }
}

// Seeded sampling with speculation emits exactly the plain sampled tokens, for
// drafts that are right, partly wrong, wrong, or n-gram guesses. Accepting a
// draft d exactly when the sampler picks d is the rejection rule for a
// deterministic draft (accept with probability p(d), else draw from p without d).
TEST_P(Speculation, SampledTokenIdenticalToPlainSampling) {
  auto model = load_model(test::fixture("golden/" + GetParam()), test::on_test_device());
  const int64_t V = model->info().vocab;
  auto ref = test::read_i64(test::fixture("golden/" + GetParam() + "/reference.safetensors"), "input_ids");
  std::vector<int32_t> prompt(ref.begin(), ref.begin() + 8);
  const int64_t n = 32;
  SamplingParams settings[3];
  settings[0].temperature = 1.0, settings[0].seed = 11;
  settings[1].temperature = 0.7, settings[1].top_p = 0.9, settings[1].top_k = 40, settings[1].seed = 5;
  settings[2].temperature = 0.3, settings[2].min_p = 0.05, settings[2].seed = 99;
  for (const SamplingParams& p : settings) {
    Session plain(*model);
    const std::vector<int32_t> want = test::sample_plainly(plain, prompt, n, p);
    std::vector<int32_t> truth = prompt;
    truth.insert(truth.end(), want.begin(), want.end());
    int64_t accepted = 0, proposed = 0;
    for (bool gated : {false, true})
    for (int64_t wrong_every : {0, 3, 1}) {
      ReplayDrafter d(truth, wrong_every, V);
      Session s(*model);
      SpeculationStats st;
      EXPECT_EQ(sample_speculatively(s, prompt, n, p, d, &st, gated), want)
          << "temperature " << p.temperature << ", every " << wrong_every << " wrong" << (gated ? ", gated" : "");
      // The state after speculation is the plain one: the same next logits.
      Session q(*model);
      test::sample_plainly(q, prompt, n, p);
      EXPECT_EQ(s.tokens(), q.tokens());
      const std::vector<float> next = s.feed({want.back()});
      EXPECT_EQ(next, q.feed({want.back()}));
      if (gated) continue;  // the gate may draft rarely; the counts below are of drafting at every step
      accepted += st.accepted, proposed += st.proposed;
      if (wrong_every == 0) {
        EXPECT_EQ(st.accepted, st.proposed);
      }
      if (wrong_every == 1) {
        EXPECT_EQ(st.accepted, 0);
      }
    }
    EXPECT_GT(accepted, 0);
    EXPECT_GT(proposed, accepted);
    for (bool gated : {false, true}) {
      NgramDrafter ng(4, 1);
      Session s(*model);
      EXPECT_EQ(sample_speculatively(s, prompt, n, p, ng, nullptr, gated), want) << "n-gram drafts" << (gated ? ", gated" : "");
    }
  }
}

// The server keeps a rollback point at the end of a prompt while speculation
// sets and clears its own per pass: rolling back the outer one afterwards must
// give the state of feeding the kept tokens straight.
TEST(Rollback, NestedCheckpoints) {
  for (const char* name : {"kimi_linear_tiny", "gpt_oss_tiny", "deepseek_v3_tiny"}) {
    auto model = load_model(test::fixture(std::string("golden/") + name), test::on_test_device());
    std::vector<int32_t> prefix = {5, 17, 9, 33, 41}, gen = {100, 200, 300, 400, 500, 600, 700};
    // The outer mark records per-token updates, or not (then keeping a prefix feeds it again).
    for (bool record : {true, false}) {
      const std::string label = std::string(name) + (record ? ", recording outer mark" : ", outer mark without records");
      Session a(*model);
      a.feed(prefix);
      a.checkpoint(record);            // outer: end of the prompt
      a.feed({gen[0], gen[1]});
      a.checkpoint();                  // inner: a verification pass with a wrong guess
      a.feed_all({gen[2], gen[3], 999});
      a.rollback(2);
      a.checkpoint();                  // a second pass, fully kept
      a.feed_all({gen[4], gen[5], gen[6]});
      a.rollback(3);
      EXPECT_EQ(a.open_checkpoints(), 1u);
      a.rollback(6);                   // outer: keep 6 of the 7 generated tokens (across both passes)
      EXPECT_EQ(a.open_checkpoints(), 0u);
      Session b(*model);
      std::vector<int32_t> straight = prefix;
      straight.insert(straight.end(), gen.begin(), gen.begin() + 6);
      b.feed(straight);
      EXPECT_EQ(a.tokens(), b.tokens()) << label;
      EXPECT_EQ(a.state_bytes(), b.state_bytes()) << label << ": records left behind";
      EXPECT_EQ(a.feed_all({7, 8}), b.feed_all({7, 8})) << label;

      // commit() closes a mark and keeps everything; the enclosing one still works.
      Session c(*model), e(*model);
      c.feed(prefix);
      c.checkpoint(record);
      c.feed({gen[0]});
      c.checkpoint();
      c.feed_all({gen[1], gen[2]});
      c.commit();
      c.rollback(2);
      e.feed(prefix);
      e.feed({gen[0], gen[1]});
      EXPECT_EQ(c.feed_all({7, 8}), e.feed_all({7, 8})) << label;
      EXPECT_THROW(c.rollback(0), Error) << "no mark left";
    }
  }
}

// A mark kept open over a long generation without records costs only its copy
// of the state: the recurrent state's size does not grow with the tokens fed.
TEST(Rollback, MarkWithoutRecordsDoesNotGrow) {
  auto model = load_model(test::fixture("golden/kimi_linear_tiny"), test::on_test_device());
  Session with(*model), without(*model), none(*model);
  with.checkpoint(true);
  without.checkpoint(false);
  const int64_t start = without.state_bytes();
  std::vector<int32_t> toks;
  for (int i = 0; i < 40; ++i) toks.push_back(int32_t(3 + 7 * i));
  for (Session* s : {&with, &without, &none}) s->feed(toks);
  // Only the KV caches of the MLA layers grow, the same in both sessions without records.
  EXPECT_EQ(without.state_bytes() - start, none.state_bytes() - Session(*model).state_bytes());
  EXPECT_GT(with.state_bytes(), without.state_bytes());
}

}  // namespace
}  // namespace sluice::speculative_test

namespace sluice::speculative_test {
namespace {

// A draft model sharing the vocabulary: the target itself (every draft right),
// a quantised release of the same weights (mostly right) and an unrelated
// model (mostly wrong) all leave greedy and sampled output unchanged.
TEST(ModelDrafter, DraftModelsOnlyChangeHowManyPassesAreNeeded) {
  struct Case {
    const char *target, *draft;
  } cases[] = {{"kimi_linear_tiny", "kimi_linear_tiny"},
               {"deepseek_v3_tiny", "deepseek_v3_tiny_int4"},
               {"gpt_oss_tiny", "qwen3_moe_tiny"}};
  for (const auto& c : cases) {
    auto target = load_model(test::fixture(std::string("golden/") + c.target), test::on_test_device());
    auto ref = test::read_i64(test::fixture(std::string("golden/") + c.target + "/reference.safetensors"), "input_ids");
    std::vector<int32_t> prompt(ref.begin(), ref.begin() + 8);
    const int64_t n = 32;
    Session plain(*target);
    const auto want = generate_greedy(plain, prompt, n, true);
    ModelDrafter drafter(load_model(test::fixture(std::string("golden/") + c.draft), test::on_test_device()), target->info().vocab);
    Session s(*target);
    SpeculationStats st;
    // Drafts at every step: the gate would (rightly) stop a drafter as costly as the target.
    SpeculationOptions always;
    always.adaptive = false;
    EXPECT_EQ(generate_speculative(s, prompt, n, true, drafter, always, &st), want) << c.target << " <- " << c.draft;
    EXPECT_GT(st.proposed, 0);
    if (std::string(c.target) == c.draft) {
      EXPECT_EQ(st.accepted, st.proposed) << c.target;
      EXPECT_LE(st.forward_passes(), n / 4) << c.target;
    }
    // Sampling with the same drafter (its state follows the new history).
    SamplingParams p;
    p.temperature = 0.8, p.seed = 3;
    Session r(*target);
    const auto sampled = test::sample_plainly(r, prompt, n, p);
    for (bool gated : {false, true}) {  // gated: paused drafters restart from the last tokens
      Session q(*target);
      EXPECT_EQ(sample_speculatively(q, prompt, n, p, drafter, nullptr, gated), sampled)
          << c.target << " <- " << c.draft << (gated ? ", gated" : "");
    }
  }
  auto big = load_model(test::fixture("golden/deepseek_v3_tiny"), test::on_test_device());
  EXPECT_THROW(ModelDrafter(*big, 512), Error);
}

// Histories that extend, diverge from, repeat or shorten the last one give the
// proposals of a drafter that starts afresh (KV caches, sliding window, KDA).
TEST(ModelDrafter, FollowsAnyHistory) {
  for (const char* name : {"kimi_linear_tiny", "gpt_oss_tiny"}) {
    auto draft = load_model(test::fixture(std::string("golden/") + name), test::on_test_device());
    ModelDrafter kept(*draft, draft->info().vocab);
    std::vector<int32_t> a;
    for (int i = 0; i < 20; ++i) a.push_back(int32_t((37 * i + 11) % 1000));
    std::vector<int32_t> b(a.begin(), a.begin() + 12);
    for (int i = 0; i < 6; ++i) b.push_back(int32_t(500 + i));
    std::vector<int32_t> c = b;
    c.insert(c.end(), {9, 8, 7});
    std::vector<int32_t> short_a(a.begin(), a.begin() + 5);
    for (const std::vector<int32_t>* h : {&a, &b, &b, &c, &short_a, &a}) {
      ModelDrafter fresh(*draft, draft->info().vocab);
      EXPECT_EQ(kept.propose(*h, 5), fresh.propose(*h, 5)) << name << ", history of " << h->size();
    }
  }
}

}  // namespace
}  // namespace sluice::speculative_test
