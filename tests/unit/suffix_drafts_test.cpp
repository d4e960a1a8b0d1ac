// Suffix drafts (issue 34, item 2) and the economics gate (item 4): the suffix
// index against brute force, continuation by frequency, the cap and eviction,
// documents across requests; the drafter's output token-identical to plain
// decoding, greedy and sampled, on every golden architecture; the gate turning
// drafting off where drafts do not pay and keeping it on where they do.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>

#include "engine/engine.h"
#include "runtime/draft_gate.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "runtime/suffix_drafter.h"
#include "runtime/suffix_index.h"
#include "support/plain_decoding.h"
#include "support/test_device.h"
#include "support/test_support.h"

namespace sluice::suffix_drafts_test {
namespace {

using Tokens = std::vector<int32_t>;

TEST(SuffixIndex, LongestMatchAndWhatFollowedIt) {
  SuffixIndex ix;
  ix.append(Tokens{1, 2, 3, 4, 5, 9, 2, 3, 4, 6, 1, 2, 3});
  const auto m = ix.longest_match();
  EXPECT_EQ(m.length, 3);  // "1 2 3" occurred at the start
  EXPECT_EQ(ix.continuation(m, 3, 0.3), (Tokens{4, 5, 9}));
  EXPECT_EQ(ix.continuation(m, 2, 0.3), (Tokens{4, 5}));
  SuffixIndex fresh;
  fresh.append(Tokens{1, 2, 3});
  EXPECT_EQ(fresh.longest_match().length, 0);
  EXPECT_TRUE(fresh.continuation(fresh.longest_match(), 4, 0).empty());
}

// The most frequent continuation wins; the confidence bound cuts it.
TEST(SuffixIndex, ContinuationFollowsFrequency) {
  SuffixIndex ix;
  for (const Tokens& d : {Tokens{7, 8, 1, 50}, Tokens{7, 8, 1, 50}, Tokens{7, 8, 2, 60}}) {
    ix.append(d);
    ix.begin_document();
  }
  ix.append(Tokens{5, 7, 8});
  const auto m = ix.longest_match();
  EXPECT_EQ(m.length, 2);
  EXPECT_EQ(ix.continuation(m, 4, 0.3), (Tokens{1, 50}));  // 2 of 3, then 2 of 2
  EXPECT_EQ(ix.continuation(m, 4, 0.7), Tokens{});         // 2/3 < 0.7
  // A longer match decides over frequency.
  ix.append(Tokens{9});
  ix.begin_document();
  ix.append(Tokens{4, 7, 8, 2});
  ix.begin_document();
  ix.append(Tokens{4, 7, 8});
  const auto longer = ix.longest_match();
  EXPECT_EQ(longer.length, 3);
  EXPECT_EQ(ix.continuation(longer, 4, 0.3), Tokens{2});  // the document ended after it
}

// No match spans two documents.
TEST(SuffixIndex, DocumentsAreSeparate) {
  SuffixIndex ix;
  ix.append(Tokens{1, 2});
  ix.begin_document();
  ix.append(Tokens{3, 4});
  ix.begin_document();
  ix.append(Tokens{2, 3});
  EXPECT_EQ(ix.longest_match().length, 1);  // "3", not "2 3"
  EXPECT_EQ(ix.continuation(ix.longest_match(), 4, 0.3), Tokens{4});
  EXPECT_EQ(ix.documents(), 3);
}

// Against brute force on random texts over a small alphabet: the longest
// suffix of the open document that ends earlier (never across a document's
// end), and a first continuation token that is among the most frequent ones.
TEST(SuffixIndex, MatchesBruteForce) {
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    SuffixIndex ix;
    std::vector<Tokens> docs(1);
    const int alphabet = 2 + round % 4;
    for (int step = 0; step < 400; ++step) {
      if (rng() % 60 == 0) {
        ix.begin_document();
        if (!docs.back().empty()) docs.emplace_back();
        continue;
      }
      const int32_t t = int32_t(rng() % unsigned(alphabet));
      ix.append(t);
      docs.back().push_back(t);
      const Tokens& open = docs.back();
      // Occurrences (document, end position) of the open document's last L tokens, before its end.
      auto ends = [&](int64_t L) {
        std::vector<std::pair<size_t, size_t>> r;
        for (size_t d = 0; d < docs.size(); ++d)
          for (size_t e = size_t(L) - 1; e < docs[d].size(); ++e) {
            if (d + 1 == docs.size() && e + 1 == open.size()) continue;
            if (std::equal(open.end() - L, open.end(), docs[d].begin() + std::ptrdiff_t(e + 1 - size_t(L))))
              r.push_back({d, e});
          }
        return r;
      };
      int64_t want = 0;
      while (want < int64_t(open.size()) && !ends(want + 1).empty()) ++want;
      const auto m = ix.longest_match();
      ASSERT_EQ(m.length, want) << "round " << round << ", step " << step;
      if (want == 0) continue;
      std::map<int32_t, int> next;
      for (auto [d, e] : ends(want))
        if (e + 1 < docs[d].size()) ++next[docs[d][e + 1]];
      const Tokens c = ix.continuation(m, 1, 0.0);
      if (next.empty()) {
        EXPECT_TRUE(c.empty());
        continue;
      }
      int most = 0;
      for (auto [tok, n] : next) most = std::max(most, n);
      ASSERT_EQ(c.size(), 1u);
      EXPECT_EQ(next[c[0]], most) << "round " << round << ", step " << step;
    }
  }
}

// The token cap holds: old documents are evicted (their text no longer
// matches), the newest still match, and the memory stops growing.
TEST(SuffixIndex, CapEvictsTheOldestDocuments) {
  SuffixIndex ix(1024);
  const Tokens old_quote = {900, 901, 902, 903, 904, 905};
  ix.append(old_quote);
  ix.begin_document();
  std::mt19937 rng(3);
  int64_t bytes_after_first_rebuild = 0;
  for (int d = 0; d < 60; ++d) {
    for (int i = 0; i < 100; ++i) ix.append(int32_t(rng() % 500));
    ix.begin_document();
    EXPECT_LE(ix.tokens(), 1024);
    if (ix.rebuilds() == 1 && bytes_after_first_rebuild == 0) bytes_after_first_rebuild = ix.bytes();
  }
  EXPECT_GE(ix.rebuilds(), 5);
  EXPECT_LE(ix.bytes(), bytes_after_first_rebuild * 2);
  EXPECT_LE(ix.bytes(), 1024 * 400);
  ix.append(Tokens{900, 901, 902});
  EXPECT_EQ(ix.longest_match().length, 0) << "the oldest document was evicted";
  ix.begin_document();
  const Tokens recent = {600, 601, 602, 603, 604};
  ix.append(recent);
  ix.begin_document();
  ix.append(Tokens{600, 601, 602});
  EXPECT_EQ(ix.longest_match().length, 3);
  EXPECT_EQ(ix.continuation(ix.longest_match(), 2, 0.3), (Tokens{603, 604}));
  // One document longer than the cap keeps its tail.
  SuffixIndex one(1024);
  for (int i = 0; i < 5000; ++i) one.append(int32_t(i));
  EXPECT_LE(one.tokens(), 1024);
  EXPECT_EQ(one.documents(), 1);
  one.append(Tokens{4990, 4991});
  EXPECT_EQ(one.longest_match().length, 2);
  EXPECT_EQ(one.continuation(one.longest_match(), 3, 0.3), (Tokens{4992, 4993, 4994}));
}

// The drafter across requests: a tool output seen in an earlier request is
// drafted when it is quoted again, as far as the match is long; a request that
// repeats an earlier prompt gets the earlier reply as its draft.
TEST(SuffixDrafter, DraftsAcrossRequests) {
  SuffixDraftOptions o;
  o.overlap = 4;
  SuffixDrafter d(o);
  Tokens tool;
  for (int i = 0; i < 40; ++i) tool.push_back(int32_t(1000 + 7 * i));
  Tokens first = {1, 2, 3};
  first.insert(first.end(), tool.begin(), tool.end());
  EXPECT_TRUE(d.propose(first, 8).empty());  // nothing repeats yet
  // The next request: another conversation quoting the tool output's start.
  Tokens second = {50, 51, 52, tool[0], tool[1], tool[2]};
  EXPECT_EQ(d.propose(second, 8), (Tokens{tool[3], tool[4], tool[5]}));  // as long as the match
  second.insert(second.end(), tool.begin() + 3, tool.begin() + 12);      // the conversation goes on quoting
  EXPECT_EQ(d.propose(second, 8), Tokens(tool.begin() + 12, tool.begin() + 20));
  // The first request's start again: what followed it is drafted.
  Tokens again(first.begin(), first.begin() + 20);
  EXPECT_EQ(d.propose(again, 5), Tokens(first.begin() + 20, first.begin() + 25));
  EXPECT_EQ(d.index_size().documents, 3);
  // That conversation goes on: only its new tokens are indexed.
  const int64_t before = d.index_size().tokens;
  Tokens longer(first.begin(), first.begin() + 30);
  d.propose(longer, 4);
  EXPECT_EQ(d.index_size().tokens, before + 10);
  EXPECT_EQ(d.index_size().documents, 3);
  // It departs (an edited turn): a new document from `overlap` tokens before the departure.
  Tokens edited(first.begin(), first.begin() + 25);
  edited.push_back(5);
  d.propose(edited, 4);
  EXPECT_EQ(d.index_size().tokens, before + 10 + 4 + 1);
  EXPECT_EQ(d.index_size().documents, 4);
  EXPECT_GT(d.index_size().bytes, 0);
}

// ---- The gate, simulated: a pass of k drafts costs 1 + c*k plain steps and
// accepts each draft with probability a after an accepted one.
struct Simulated {
  double cost_per_token;  // time per emitted token, in plain steps
  int64_t passes, off_steps;
  bool on;
};
Simulated simulate(double a, double c, int64_t tokens, uint32_t seed, int64_t max_draft = 8,
                   const std::function<double(int64_t)>& accept_at = {}) {
  DraftGateOptions o;
  o.max_draft = max_draft;
  DraftGate g(o);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  double time = 0;
  int64_t n = 0, passes = 0;
  while (n < tokens) {
    const int64_t k = g.next(tokens - n);
    if (k == 0) {
      time += 1;
      g.plain(1.0);
      ++n;
      continue;
    }
    const double acc = accept_at ? accept_at(n) : a;
    int64_t accepted = 0;
    while (accepted < k && u(rng) < acc) ++accepted;
    const double t = 1 + c * double(k);
    time += t;
    g.pass(k, accepted, t);
    n += accepted + 1;
    ++passes;
  }
  return {time / double(n), passes, g.off_steps(), g.on()};
}

TEST(DraftGate, OffWhereDraftsDoNotPay) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    // No draft is ever accepted (prose the drafter cannot predict).
    Simulated s = simulate(0.0, 0.3, 2000, seed);
    EXPECT_LE(s.cost_per_token, 1.05) << "seed " << seed;
    EXPECT_FALSE(s.on);
    EXPECT_LE(s.passes, 16);
    // Good drafts, but each drafted token costs more than a plain step (a pass
    // reads the union of its tokens' experts on a streamed MoE).
    Simulated e = simulate(0.8, 1.1, 2000, seed);
    EXPECT_LE(e.cost_per_token, 1.05) << "seed " << seed;
    // Weak drafts at a moderate cost.
    Simulated w = simulate(0.2, 0.5, 2000, seed);
    EXPECT_LE(w.cost_per_token, 1.05) << "seed " << seed;
  }
}

TEST(DraftGate, OnWhereDraftsPay) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    Simulated s = simulate(0.9, 0.2, 2000, seed);  // a re-quoted tool output
    EXPECT_TRUE(s.on) << "seed " << seed;
    EXPECT_LT(s.cost_per_token, 0.6) << "seed " << seed;
    EXPECT_LT(s.off_steps, 50) << "seed " << seed;
    Simulated perfect = simulate(1.0, 0.8, 2000, seed);  // expensive passes, every draft right
    EXPECT_LT(perfect.cost_per_token, 0.9) << "seed " << seed;
  }
}

// Drafts stop paying for a while, then pay again: the gate pauses, and a
// probe after the pause turns drafting back on.
TEST(DraftGate, ProbesTurnDraftingBackOn) {
  auto phases = [](int64_t n) { return n < 500 ? 0.95 : n < 1500 ? 0.0 : 0.95; };
  DraftGateOptions o;
  DraftGate g(o);
  int64_t n = 0, passes_late = 0, off_mid = 0;
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  while (n < 3000) {
    const int64_t k = g.next(3000 - n);
    if (k == 0) {
      g.plain(1.0);
      off_mid += (n >= 600 && n < 1500);
      ++n;
      continue;
    }
    int64_t accepted = 0;
    while (accepted < k && u(rng) < phases(n)) ++accepted;
    g.pass(k, accepted, 1 + 0.2 * double(k));
    n += accepted + 1;
    passes_late += n >= 1900;
  }
  EXPECT_GT(off_mid, 800);       // paused through the unpredictable middle
  EXPECT_GT(passes_late, 50);    // drafting again at the end
  EXPECT_LT(passes_late, 1100 / 3);
  EXPECT_TRUE(g.on());
}

// ---- On the golden models.
Tokens sample_speculatively(Session& s, const Tokens& prompt, int64_t n, const SamplingParams& p, Drafter& d,
                            SpeculationStats* st) {
  Sampler sampler(p);
  const int64_t V = s.model().info().vocab;
  auto pick = [&](float* logits) { return sampler.sample(logits, V).token; };
  return generate(s, prompt, n, /*ignore_eos=*/true, pick, &d, {}, st);
}

class SuffixSpeculation : public ::testing::TestWithParam<std::string> {};

// One drafter serves three requests like a server does: the first greedy (its
// reply enters the index), the same prompt again (the index drafts the earlier
// reply: all right) and sampled ones (drafts of the greedy reply: mostly
// wrong). Every reply equals plain decoding.
TEST_P(SuffixSpeculation, TokenIdenticalToPlainGreedyAndSampled) {
  auto model = load_model(test::fixture("golden/" + GetParam()), test::on_test_device());
  auto ref = test::read_i64(test::fixture("golden/" + GetParam() + "/reference.safetensors"), "input_ids");
  Tokens prompt;
  for (int r = 0; r < 3; ++r) prompt.insert(prompt.end(), ref.begin(), ref.begin() + 6);
  const int64_t n = 40;
  SuffixDrafter drafter;
  Session p1(*model);
  const Tokens want = generate_greedy(p1, prompt, n, true);
  for (int round = 0; round < 2; ++round) {
    Session s(*model);
    SpeculationStats st;
    // Round 0 under the gate; round 1 drafting at every step (the drafts' quality, not the machine's timing, decides).
    SpeculationOptions opts;
    opts.adaptive = round == 0;
    EXPECT_EQ(generate_speculative(s, prompt, n, true, drafter, opts, &st), want) << "round " << round;
    if (round == 1) {  // the first reply is in the index now
      EXPECT_GT(st.accepted, n / 2) << "round " << round;  // (a reply that loops may make another continuation more frequent)
      EXPECT_LT(st.forward_passes(), n / 3);
    }
  }
  SamplingParams settings[2];
  settings[0].temperature = 1.0, settings[0].seed = 11;
  settings[1].temperature = 0.7, settings[1].top_p = 0.9, settings[1].top_k = 40, settings[1].seed = 5;
  for (const SamplingParams& p : settings) {
    Session plain(*model), s(*model);
    const Tokens sampled = test::sample_plainly(plain, prompt, n, p);
    SpeculationStats st;
    EXPECT_EQ(sample_speculatively(s, prompt, n, p, drafter, &st), sampled) << "temperature " << p.temperature;
    EXPECT_EQ(s.tokens(), plain.tokens());
    EXPECT_EQ(s.feed({sampled.back()}), plain.feed({sampled.back()}));
  }
  EXPECT_GT(drafter.index_size().documents, 1);
}

INSTANTIATE_TEST_SUITE_P(Models, SuffixSpeculation,
                         ::testing::Values("deepseek_v3_tiny", "deepseek_v3_tiny_fp8", "deepseek_v3_tiny_int4",
                                           "qwen3_moe_tiny", "gpt_oss_tiny", "kimi_linear_tiny", "kimi_k3_tiny"));

// The gate in decode(): drafts that are always wrong are switched off after a
// few passes (the text stays plain), drafts that are always right keep it on.
// The passes cost what they cost on this tiny model on a quiet machine (a pass
// of 9 tokens about 5 plain steps), whatever the load on this one: with
// measured times a busy machine made the 9-token pass cost 9 plain steps, and
// then drafting rightly does not pay (bench/speculation.sh measures the gate
// with real timings).
TEST(DraftGate, InDecodeOffForWrongDraftsOnForRightOnes) {
  auto model = load_model(test::fixture("golden/qwen3_moe_tiny"), test::on_test_device());
  const int64_t V = model->info().vocab;
  auto ref = test::read_i64(test::fixture("golden/qwen3_moe_tiny/reference.safetensors"), "input_ids");
  Tokens prompt(ref.begin(), ref.begin() + 8);
  const int64_t n = 240;  // the model's context is 256
  Session plain(*model);
  const Tokens want = generate_greedy(plain, prompt, n, true);
  Tokens truth = prompt;
  truth.insert(truth.end(), want.begin(), want.end());
  ReplayDrafter wrong(truth, 1, V), right(truth, 0, V);
  Session a(*model), b(*model);
  SpeculationStats off, on;
  SpeculationOptions quiet;
  quiet.pass_cost = [](int64_t tokens) { return 3e-4 * (1 + 0.5 * double(tokens - 1)); };
  EXPECT_EQ(generate_speculative(a, prompt, n, true, wrong, quiet, &off), want);
  EXPECT_EQ(generate_speculative(b, prompt, n, true, right, quiet, &on), want);
  EXPECT_FALSE(off.gate_on);
  EXPECT_LE(off.passes, 24) << describe_speculation(off);
  EXPECT_GT(off.off_steps, n * 3 / 4) << describe_speculation(off);
  EXPECT_TRUE(on.gate_on) << describe_speculation(on);
  // At most a pause at the start, before the probes showed how well the drafts do (a pass of
  // 9 tokens costs about 5 plain steps on this tiny model, so drafting needs high acceptance).
  EXPECT_LE(on.off_steps, 24) << describe_speculation(on);
  EXPECT_LT(on.forward_passes(), n / 3) << describe_speculation(on);
}

// The shipped model copies a re-quoted tool output: suffix drafts are mostly
// accepted and the text is plain decoding's, with the gate (whether drafting
// pays on this machine is the gate's measurement: on two busy CPU cores a
// drafted token of this small model costs about 0.9 plain steps) and without.
TEST(SuffixDrafts, ShippedModelRequotingAToolOutput) {
  const std::string tool =
      "total 48\n-rw-r--r-- 1 agent agent 1204 Dec  5 12:01 README.md\n-rw-r--r-- 1 agent agent 3311 Dec  5 12:02 "
      "main.cpp\n-rw-r--r-- 1 agent agent  812 Dec  5 12:02 util.h\n";
  const std::string prompt = "$ ls -l\n" + tool + "\n$ ls -l\n" + tool + "\n$ ls -l\n" + tool.substr(0, 30);
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"run", prompt, "--max-new", "64", "--stats"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = test::run_sluice(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r;
  };
  auto plain = run({});
  auto gated = run({"--draft", "suffix"});
  EXPECT_EQ(gated.out, plain.out);
  EXPECT_NE(gated.err.find("; gate "), std::string::npos) << gated.err;
  EXPECT_NE(gated.err.find("suffix index: "), std::string::npos) << gated.err;
  auto always = run({"--draft", "suffix", "--no-draft-gate"});
  EXPECT_EQ(always.out, plain.out);
  // Most drafts accepted: "N of M drafts accepted (P%)" with P >= 60.
  const size_t at = always.err.find("drafts accepted (");
  ASSERT_NE(at, std::string::npos) << always.err;
  EXPECT_GE(std::stoi(always.err.substr(at + 17)), 60) << always.err;
  auto sampled = run({"--temperature", "0.8", "--seed", "4"});
  EXPECT_EQ(run({"--temperature", "0.8", "--seed", "4", "--draft", "suffix"}).out, sampled.out);
  EXPECT_EQ(run({"--temperature", "0.8", "--seed", "4", "--draft", "suffix", "--no-draft-gate"}).out, sampled.out);
}

}  // namespace
}  // namespace sluice::suffix_drafts_test
