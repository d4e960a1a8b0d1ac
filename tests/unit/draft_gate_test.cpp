// The economics gate (runtime/draft_gate.h) where the first one fell short:
// lookup drafters watched while paused instead of probed blindly, probes of a
// costly drafter spaced by what a failed one lost, the draft length chosen
// from each length's measured cost, and a paused draft model restarting from
// the last tokens. Simulated (synthetic acceptance and costs fed to the gate)
// and in decode() on a golden model, with pass costs given (not timed: the
// tests must not depend on how busy the machine is).
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <utility>

#include "engine/engine.h"
#include "runtime/draft_gate.h"
#include "runtime/model_drafter.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "support/test_device.h"
#include "support/test_support.h"

namespace sluice::draft_gate_test {
namespace {

using Tokens = std::vector<int32_t>;

// ---- Simulated: each drafted token is right with probability accept(n) after
// a right one (n: tokens emitted so far); a pass of k drafts costs cost(k)
// plain steps. A lookup gate's watched drafts are drawn the same way and
// resolved by the plain tokens that follow.
struct GateRun {
  double steps_per_token;  // time per emitted token, in plain steps
  int64_t passes, probes, watched;
  std::vector<std::pair<int64_t, int64_t>> pass_at;  // (tokens emitted before it, drafts)
};

GateRun simulate(bool lookup, int64_t tokens, const std::function<double(int64_t)>& accept,
             const std::function<double(int64_t)>& cost, uint32_t seed, int64_t max_draft = 8) {
  DraftGateOptions o;
  o.max_draft = max_draft;
  DraftGate g(o, lookup);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  auto right = [&](int64_t k, int64_t n) {
    int64_t a = 0;
    while (a < k && u(rng) < accept(n)) ++a;
    return a;
  };
  GateRun r{0, 0, 0, 0, {}};
  double time = 0;
  int64_t n = 0;
  int64_t watch_k = 0, watch_right = 0, watch_seen = 0;  // an outstanding watched draft
  while (n < tokens) {
    const int64_t k = g.next(tokens - n);
    if (k == 0) {
      if (watch_k == 0) {
        watch_k = g.watch(tokens - n);
        watch_right = watch_k > 0 ? right(watch_k, n) : 0;
        watch_seen = 0;
      }
      time += 1;
      g.plain(1.0);
      ++n;
      if (watch_k > 0) {
        const bool hit = watch_seen < watch_right;
        watch_seen += hit ? 1 : 0;
        if (!hit || watch_seen == watch_k) {
          g.watched(watch_k, watch_seen);
          watch_k = 0;
        }
      }
      continue;
    }
    watch_k = 0;
    const int64_t accepted = right(k, n);
    const double t = cost(k);
    r.pass_at.emplace_back(n, k);
    time += t;
    g.pass(k, accepted, t);
    n += accepted + 1;
    ++r.passes;
  }
  r.steps_per_token = time / double(n);
  r.probes = g.probes();
  r.watched = g.watched_drafts();
  return r;
}

int64_t passes_in(const GateRun& r, int64_t from, int64_t to) {
  int64_t c = 0;
  for (const auto& [n, k] : r.pass_at) c += n >= from && n < to;
  return c;
}

// A lookup drafter is watched while paused: no pass is spent on text it cannot
// predict, and drafting resumes within a few watched drafts of the text turning
// predictable (blind probes would come up to 256 steps apart).
TEST(DraftGate, WatchesLookupsInsteadOfProbing) {
  auto phases = [](int64_t n) { return n < 500 ? 0.95 : n < 1530 ? 0.0 : 0.95; };
  auto cost = [](int64_t k) { return 1 + 0.3 * double(k); };
  for (uint32_t seed : {1u, 2u, 3u}) {
    const GateRun r = simulate(true, 3000, phases, cost, seed);
    EXPECT_EQ(passes_in(r, 560, 1530), 0) << "seed " << seed;  // (passes until the evidence shows drafts stopped paying)
    EXPECT_GT(r.watched, 50) << "seed " << seed;
    // Back on within three watched drafts of 8 tokens.
    ASSERT_GT(passes_in(r, 1530, 1560), 0) << "seed " << seed;
    EXPECT_EQ(r.probes, 1) << "seed " << seed;  // the first draft only
  }
}

// A drafter that cannot be watched (a draft model) is probed; a failed probe's
// measured loss is at most 2% of the pause after it, so drafts that never pay
// cost at most about 2% however expensive a probe is (here a 2-token probe
// takes 11 plain steps: pauses capped at 256 would lose 4%).
TEST(DraftGate, ProbesSpacedByWhatAFailedOneLost) {
  auto never = [](int64_t) { return 0.0; };
  for (double per_token : {0.5, 5.0}) {
    auto cost = [&](int64_t k) { return 1 + per_token * double(k); };
    for (uint32_t seed : {1u, 2u}) {
      const GateRun r = simulate(false, 20000, never, cost, seed);
      EXPECT_LE(r.steps_per_token, 1.02 + cost(2) / 20000) << "per token " << per_token << ", seed " << seed;
      EXPECT_EQ(r.watched, 0);
    }
  }
}

// A pass's cost is not linear in its drafts: here up to 3 drafts share the
// pass's fixed costs (0.2 plain steps each), beyond that each costs 1.5 (a
// streamed MoE reading new experts). At acceptance 0.9 the best length is 3
// (3.44 tokens for 1.6 steps); a single per-token cost averaged over the
// lengths tried sees neither.
TEST(DraftGate, ChoosesTheLengthByEachLengthsMeasuredCost) {
  auto cliff = [](int64_t k) { return k <= 3 ? 1 + 0.2 * double(k) : 1.6 + 1.5 * double(k - 3); };
  auto high = [](int64_t) { return 0.9; };
  for (uint32_t seed : {1u, 2u, 3u}) {
    for (bool lookup : {false, true}) {
      const GateRun r = simulate(lookup, 4000, high, cliff, seed);
      EXPECT_LT(r.steps_per_token, 1.6 / 3.44 * 1.1) << "seed " << seed << (lookup ? ", lookup" : "");
      int64_t long_passes = 0;
      for (const auto& [n, k] : r.pass_at) long_passes += k > 3;
      EXPECT_LT(long_passes, 12) << "seed " << seed;  // each length beyond 3 tried about once
    }
  }
  // And where longer drafts get cheaper per token (fixed costs shared), it drafts them.
  auto shared = [](int64_t k) { return 1.8 + 0.05 * double(k); };
  const GateRun r = simulate(false, 4000, high, shared, 1);
  int64_t longest = 0;
  for (const auto& [n, k] : r.pass_at) longest += k == 8;
  EXPECT_GT(longest, int64_t(r.pass_at.size()) / 2);
}

// ---- In decode(), on a golden model.
struct Recorder {
  int64_t emitted = 0;
  std::vector<std::pair<int64_t, int64_t>> steps;  // (tokens emitted before it, tokens in the pass)
};

// The drafts are the plain output, wrong (every token) while the history is shorter than `right_from`.
class PhasedDrafter : public ReplayDrafter {
 public:
  PhasedDrafter(Tokens text, size_t right_from, int64_t vocab, bool costly)
      : ReplayDrafter(text, 0, vocab), right_from_(right_from), vocab_(vocab), costly_(costly) {}
  Tokens propose(const Tokens& history, int64_t max) override {
    Tokens d = ReplayDrafter::propose(history, max);
    if (history.size() < right_from_)
      for (int32_t& t : d) t = int32_t((t + 1) % vocab_);
    return d;
  }
  bool costs_when_empty() const override { return costly_; }  // a draft model's kind of cost: not watched

 private:
  size_t right_from_;
  int64_t vocab_;
  bool costly_;
};

struct Decoded {
  Tokens out;
  SpeculationStats st;
  Recorder rec;
};

Decoded decode_with(const Model& model, const Tokens& prompt, int64_t n, Drafter& d,
                    const std::function<double(int64_t)>& cost) {
  Decoded r;
  SpeculationOptions o;
  o.pass_cost = [&](int64_t tokens) {
    r.rec.steps.emplace_back(r.rec.emitted, tokens);
    return cost(tokens);
  };
  Session s(model);
  r.out = generate_speculative(s, prompt, n, true, d, o, &r.st, [&](int32_t) { ++r.rec.emitted; });
  return r;
}

struct Fixture {
  std::unique_ptr<Model> model;
  Tokens prompt, want, truth;
};
Fixture golden(const char* name, int64_t n) {
  Fixture f;
  f.model = load_model(test::fixture(std::string("golden/") + name), test::on_test_device());
  auto ref = test::read_i64(test::fixture(std::string("golden/") + name + "/reference.safetensors"), "input_ids");
  f.prompt.assign(ref.begin(), ref.begin() + 8);
  Session plain(*f.model);
  f.want = generate_greedy(plain, f.prompt, n, true);
  f.truth = f.prompt;
  f.truth.insert(f.truth.end(), f.want.begin(), f.want.end());
  return f;
}

// Lookup drafts that are wrong for the first 130 tokens and right after: the
// gate pauses, watches them, and drafts again a few tokens after they turn
// right (probes after pauses of 8, 16, ... 128 would next come at token ~250).
TEST(DraftGate, InDecodeResumesOnWatchedLookupDrafts) {
  const int64_t n = 240;
  Fixture f = golden("qwen3_moe_tiny", n);
  const size_t switch_at = f.prompt.size() + 130;
  PhasedDrafter d(f.truth, switch_at, f.model->info().vocab, /*costly=*/false);
  auto cost = [](int64_t tokens) { return 3e-4 * (1 + 0.5 * double(tokens - 1)); };
  Decoded r = decode_with(*f.model, f.prompt, n, d, cost);
  EXPECT_EQ(r.out, f.want);
  int64_t plain_late = 0, passes_mid = 0;
  for (const auto& [at, tokens] : r.rec.steps) {
    plain_late += tokens == 1 && at >= 160;
    passes_mid += tokens > 1 && at >= 20 && at < 130;
  }
  EXPECT_LE(plain_late, 4) << describe_speculation(r.st);
  EXPECT_EQ(passes_mid, 0) << describe_speculation(r.st);
  EXPECT_GT(r.st.watched, 5) << describe_speculation(r.st);
  EXPECT_TRUE(r.st.gate_on);
}

// A costly drafter (a draft model) whose drafts are always wrong, with a
// 2-token probe costing 9 plain steps: after the first probe the pause is at
// least 8 / 0.02 = 400 steps, so no other probe comes in 240 tokens (pauses of
// 8, 16, ... would have probed 5 more times, 40 steps lost).
TEST(DraftGate, InDecodeProbesSpacedByTheirLoss) {
  const int64_t n = 240;
  Fixture f = golden("qwen3_moe_tiny", n);
  PhasedDrafter d(f.truth, size_t(1) << 30, f.model->info().vocab, /*costly=*/true);
  auto cost = [](int64_t tokens) { return 3e-4 * (1 + 4 * double(tokens - 1)); };
  Decoded r = decode_with(*f.model, f.prompt, n, d, cost);
  EXPECT_EQ(r.out, f.want);
  EXPECT_EQ(r.st.passes, 1) << describe_speculation(r.st);
  EXPECT_EQ(r.st.watched, 0);
  EXPECT_GE(r.st.gate_pause, 400) << describe_speculation(r.st);
  EXPECT_LE(r.st.plain_seconds + r.st.pass_seconds, 3e-4 * (double(n) + 9)) << describe_speculation(r.st);
}

// The pass costs of a streamed MoE: 3 drafts share the pass, each one beyond
// reads new experts. Drafts right at 0.9: the gate settles on 3 drafts.
TEST(DraftGate, InDecodeDraftsTheLengthThatPaysBest) {
  const int64_t n = 240;
  Fixture f = golden("qwen3_moe_tiny", n);
  ReplayDrafter d = ReplayDrafter::with_acceptance(f.truth, 0.9, 7, f.model->info().vocab);
  auto cost = [](int64_t tokens) {
    const double k = double(tokens - 1);
    return 1e-3 * (k <= 3 ? 1 + 0.2 * k : 1.6 + 1.5 * (k - 3));
  };
  Decoded r = decode_with(*f.model, f.prompt, n, d, cost);
  EXPECT_EQ(r.out, f.want);
  int64_t three = 0, longer = 0;
  for (const auto& [at, tokens] : r.rec.steps) three += tokens == 4, longer += tokens > 4;
  EXPECT_GT(three, 2 * longer) << describe_speculation(r.st);
  EXPECT_LT(r.st.plain_seconds + r.st.pass_seconds, 1e-3 * double(n) * 0.6) << describe_speculation(r.st);
  ASSERT_EQ(r.st.gate_pass_cost.size(), 9u);
  EXPECT_NEAR(r.st.gate_pass_cost[3], 1.6, 1e-9);
}

// A paused draft model restarts from the last 64 tokens instead of feeding
// every token decoded while paused; its proposals are then a fresh drafter's
// for those 64 tokens, and it keeps up token by token from there.
TEST(ModelDrafter, RestartsFromTheLastTokensAfterAPause) {
  for (const char* name : {"kimi_linear_tiny", "deepseek_v3_tiny"}) {
    auto draft = load_model(test::fixture(std::string("golden/") + name), test::on_test_device());
    Tokens h;
    for (int i = 0; i < 120; ++i) h.push_back(int32_t((37 * i + 11) % 1000));
    ModelDrafter kept(*draft, draft->info().vocab);
    const Tokens first(h.begin(), h.begin() + 20);
    kept.propose(first, 4);
    const int64_t before = kept.fed();
    kept.pause();
    const Tokens got = kept.propose(h, 4);
    const size_t window = ModelDrafter::kRestartWindow;
    EXPECT_LE(kept.fed() - before, int64_t(window + 1 + 3)) << name;  // the window, the last token, the proposals
    EXPECT_EQ(kept.state_start(), h.size() - 1 - window) << name;
    ModelDrafter fresh(*draft, draft->info().vocab);
    EXPECT_EQ(got, fresh.propose(Tokens(h.end() - std::ptrdiff_t(window + 1), h.end()), 4)) << name;
    // Keeping up: three more tokens feed three (and the proposals).
    Tokens more = h;
    more.insert(more.end(), {5, 6, 7});
    const int64_t at = kept.fed();
    const Tokens next = kept.propose(more, 4);
    EXPECT_LE(kept.fed() - at, 3 + 3) << name;
    EXPECT_EQ(next, fresh.propose(Tokens(more.end() - std::ptrdiff_t(window + 4), more.end()), 4)) << name;
    // A history that departs before the window starts over from its beginning.
    const Tokens other(h.begin(), h.begin() + 50);
    ModelDrafter fresh2(*draft, draft->info().vocab);
    EXPECT_EQ(kept.propose(other, 4), fresh2.propose(other, 4)) << name;
    EXPECT_EQ(kept.state_start(), 0u) << name;
    // Without a pause it catches up on everything.
    ModelDrafter plain(*draft, draft->info().vocab);
    plain.propose(first, 4);
    const int64_t p0 = plain.fed();
    plain.propose(h, 4);
    EXPECT_GE(plain.fed() - p0, int64_t(h.size() - first.size())) << name;
  }
}

}  // namespace
}  // namespace sluice::draft_gate_test
