// Several sequences decoded in one forward pass give every sequence exactly
// the tokens and logits it gets alone, on every golden architecture, greedy
// and seeded sampling, with sequences joining (their prompt prefilled in the
// same pass as the others' decode steps) and leaving between passes; a pass
// reads the union of its sequences' experts, each once per layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "engine/engine.h"
#include "experts/routing_log.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::batched_decode_test {
namespace {

struct Request {
  std::vector<int32_t> prompt;
  int64_t join = 0;  // pass at which the request arrives
  int64_t tokens = 0;
  SamplingParams sampling;  // temperature 0: greedy
};

int32_t pick(Sampler& s, const std::vector<float>& logits) {
  if (s.params().temperature == 0) return argmax(logits.data(), int64_t(logits.size()));
  return s.sample(logits.data(), int64_t(logits.size())).token;
}

// The request alone: prompt, then one token per forward pass.
std::vector<int32_t> run_alone(const Model& m, const Request& r, std::vector<float>* next_logits) {
  Session s(m);
  Sampler sampler(r.sampling);
  std::vector<int32_t> out;
  std::vector<float> lg = s.feed(r.prompt);
  for (int64_t i = 0; i < r.tokens; ++i) {
    out.push_back(pick(sampler, lg));
    lg = s.feed({out.back()});  // the last token is fed too: its logits are compared
  }
  *next_logits = lg;
  return out;
}

// All requests through one batched pass per step: a request joins with its
// whole prompt at its pass, decodes one token per pass, and leaves when done.
std::vector<std::vector<int32_t>> run_together(const Model& m, const std::vector<Request>& reqs,
                                               std::vector<std::vector<float>>* next_logits, int64_t* passes) {
  const size_t n = reqs.size();
  std::vector<std::unique_ptr<Session>> sessions(n);
  std::vector<Sampler> samplers;
  for (const Request& r : reqs) samplers.emplace_back(r.sampling);
  std::vector<std::vector<int32_t>> out(n);
  next_logits->assign(n, {});
  *passes = 0;
  for (int64_t step = 0;; ++step) {
    std::vector<Session*> batch;
    std::vector<std::vector<int32_t>> feed;
    bool pending = false;
    for (size_t i = 0; i < n; ++i) {
      const Request& r = reqs[i];
      if (r.join > step || int64_t(out[i].size()) == r.tokens) {
        pending = pending || r.join > step;
        continue;
      }
      if (!sessions[i]) {
        sessions[i] = std::make_unique<Session>(m);
        feed.push_back(r.prompt);
      } else {
        out[i].push_back(pick(samplers[i], sessions[i]->last_logits()));
        feed.push_back({out[i].back()});
      }
      batch.push_back(sessions[i].get());
    }
    if (batch.empty() && !pending) break;
    if (batch.empty()) continue;
    Session::feed_together(batch, feed);
    ++*passes;
  }
  for (size_t i = 0; i < n; ++i) (*next_logits)[i] = sessions[i]->last_logits();
  return out;
}

std::vector<Request> requests(const std::vector<int64_t>& ids, double temperature) {
  auto slice = [&](size_t at, size_t len) {
    return std::vector<int32_t>(ids.begin() + long(at), ids.begin() + long(at + len));
  };
  std::vector<Request> reqs = {{slice(0, 3), 0, 14, {}}, {slice(3, 9), 0, 6, {}}, {slice(1, 5), 2, 11, {}},
                               {slice(12, 2), 5, 9, {}}, {slice(0, 3), 1, 7, {}}};
  uint64_t seed = 3;
  for (Request& r : reqs) {
    r.sampling.temperature = temperature;
    r.sampling.top_p = temperature > 0 ? 0.95 : 1.0;
    r.sampling.seed = seed++;
  }
  return reqs;
}

class BatchedDecode : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchedDecode, EveryRequestIdenticalToRunningItAlone) {
  auto model = load_model(test::fixture("golden/" + GetParam()));
  auto ids = test::read_i64(test::fixture("golden/" + GetParam() + "/reference.safetensors"), "input_ids");
  ASSERT_GE(ids.size(), 16u);
  for (double temperature : {0.0, 0.8}) {
    const std::string label = temperature == 0 ? "greedy" : "seeded sampling";
    const std::vector<Request> reqs = requests(ids, temperature);
    std::vector<std::vector<float>> together_logits;
    int64_t passes = 0;
    const auto together = run_together(*model, reqs, &together_logits, &passes);
    int64_t alone_passes = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      std::vector<float> alone_logits;
      const auto alone = run_alone(*model, reqs[i], &alone_logits);
      alone_passes += reqs[i].tokens + 1;
      EXPECT_EQ(together[i], alone) << label << ", request " << i;
      EXPECT_TRUE(together_logits[i] == alone_logits) << label << ", request " << i << ": next logits differ";
    }
    EXPECT_LT(passes, alone_passes / 2) << label;
  }
}

// A pass asks each MoE layer once for the union of its sequences' experts:
// exactly the experts the sequences ask for when fed alone, each once.
TEST_P(BatchedDecode, PassReadsTheUnionOfItsSequencesExperts) {
  auto model = load_model(test::fixture("golden/" + GetParam()));
  auto ids = test::read_i64(test::fixture("golden/" + GetParam() + "/reference.safetensors"), "input_ids");
  RoutingLog log;
  model->set_expert_source(std::make_unique<RecordingExperts>(model->experts(), log));
  const std::vector<std::vector<int32_t>> prompts = {{int32_t(ids[0]), int32_t(ids[1])}, {int32_t(ids[2])},
                                                     {int32_t(ids[3]), int32_t(ids[4]), int32_t(ids[5])}};
  const std::vector<int32_t> next = {int32_t(ids[6]), int32_t(ids[7]), int32_t(ids[8])};
  // Alone: per layer, the union of what each sequence's decode step asked for.
  std::map<int32_t, std::set<int32_t>> want;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Session s(*model);
    s.feed(prompts[i]);
    log.steps.clear();
    s.feed({next[i]});
    for (const auto& [layer, experts] : log.steps) want[layer].insert(experts.begin(), experts.end());
  }
  ASSERT_FALSE(want.empty()) << "no MoE layer made a request";
  std::vector<std::unique_ptr<Session>> owned;
  std::vector<Session*> batch;
  for (const auto& p : prompts) {
    owned.push_back(std::make_unique<Session>(*model));
    owned.back()->feed(p);
    batch.push_back(owned.back().get());
  }
  log.steps.clear();
  std::vector<std::vector<int32_t>> feed;
  for (int32_t t : next) feed.push_back({t});
  Session::feed_together(batch, feed);
  std::map<int32_t, int> requests_per_layer;
  for (const auto& [layer, experts] : log.steps) {
    ++requests_per_layer[layer];
    EXPECT_EQ(std::set<int32_t>(experts.begin(), experts.end()), want[layer]) << "layer " << layer;
    EXPECT_EQ(std::set<int32_t>(experts.begin(), experts.end()).size(), experts.size())
        << "layer " << layer << " asked for an expert twice";
  }
  for (const auto& [layer, n] : requests_per_layer) EXPECT_EQ(n, 1) << "layer " << layer;
  EXPECT_EQ(requests_per_layer.size(), want.size());
}

INSTANTIATE_TEST_SUITE_P(Models, BatchedDecode,
                         ::testing::Values("deepseek_v3_tiny", "deepseek_v3_tiny_fp8", "deepseek_v3_tiny_int4",
                                           "qwen3_moe_tiny", "gpt_oss_tiny", "kimi_linear_tiny", "kimi_k3_tiny"));

// A batch that cannot be fed changes none of its sessions.
TEST(BatchedDecodeErrors, RefusedBatchLeavesEverySessionAsItWas) {
  auto model = load_model(test::fixture("golden/deepseek_v3_tiny"));
  Session a(*model), b(*model);
  a.feed({5, 17});
  b.feed({9});
  const std::vector<float> la = a.last_logits(), lb = b.last_logits();
  std::vector<Session*> batch = {&a, &b};
  const int32_t bad = int32_t(model->info().vocab);
  std::vector<std::vector<int32_t>> feed = {{3}, {bad}};
  EXPECT_THROW(Session::feed_together(batch, feed), Error);
  std::vector<Session*> twice = {&a, &a};
  std::vector<std::vector<int32_t>> two = {{3}, {4}};
  EXPECT_THROW(Session::feed_together(twice, two), Error);
  EXPECT_EQ(a.position(), 2);
  EXPECT_EQ(b.position(), 1);
  // Both continue exactly as sessions that never saw the refused batches.
  Session a2(*model), b2(*model);
  a2.feed({5, 17});
  b2.feed({9});
  std::vector<std::vector<int32_t>> good = {{3}, {4}};
  Session::feed_together(batch, good);
  EXPECT_EQ(a.last_logits(), a2.feed({3}));
  EXPECT_EQ(b.last_logits(), b2.feed({4}));
}

}  // namespace
}  // namespace sluice::batched_decode_test
