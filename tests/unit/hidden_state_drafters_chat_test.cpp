// The server's generator with K3's own drafters (runtime/hidden_state_drafter.h):
// over a conversation's turns (each reusing the last one's prompt and reply,
// so the session rolls back into rows the drafter took), a second
// conversation in between and a return to the first, every reply is the one
// generated without a drafter, greedy and sampled, and it drafts in each.
#include <gtest/gtest.h>

#include "chat/chat_codec.h"
#include "chat/generator.h"
#include "engine/drafter.h"
#include "engine/engine.h"
#include "store/synthetic_dspark.h"
#include "store/synthetic_eagle3.h"
#include "support/id_codec.h"
#include "support/test_support.h"

namespace sluice::chat::hidden_state_drafters_chat_test {
namespace {

using test::IdCodec;

struct Counted : GenerationCounters {
  std::vector<int64_t> proposed;  // per request
  void add_speculation(const SpeculationStats& s) override { proposed.push_back(s.proposed); }
};

std::vector<int32_t> ids_of(const std::string& text) {
  std::vector<int32_t> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t sp = text.find(' ', at);
    out.push_back(int32_t(std::stoi(text.substr(at, sp - at))));
    at = sp + 1;
  }
  return out;
}

// The replies of four requests: a conversation's two turns, another
// conversation, the first one's third turn.
std::vector<std::string> converse(const Engine& m, std::shared_ptr<Drafter> drafter, double temperature,
                                  std::vector<int64_t>* proposed) {
  Counted counters;
  IdCodec codec;
  PromptCacheOptions cache;
  cache.slots = 3;
  SpeculationOptions so;
  so.max_draft = 4;
  so.adaptive = false;
  Generator g(m, codec, counters, 0, drafter, so, cache, 8);
  auto ask = [&](const std::vector<int32_t>& prompt, uint64_t seed) {
    GenerationRequest req;
    req.kind = GenerationRequest::Kind::Completion;
    req.prompt_is_ids = true;
    req.prompt_ids = prompt;
    req.max_tokens = 12;
    req.sampling.temperature = temperature;
    req.sampling.seed = seed;
    std::string text;
    g.run(req, prompt, [&](const ReplyDelta& d, const std::vector<LogprobEntry>&) {
      text += d.content;
      return true;
    });
    return text;
  };
  std::vector<int32_t> a{5, 17, 40, 3, 99, 12, 7, 61, 8, 23};
  std::vector<std::string> replies;
  replies.push_back(ask(a, 1));
  for (int32_t t : ids_of(replies.back())) a.push_back(t);
  a.insert(a.end(), {31, 4, 77});
  replies.push_back(ask(a, 2));
  replies.push_back(ask({9, 9, 14, 200, 6, 1, 52}, 3));
  for (int32_t t : ids_of(replies[1])) a.push_back(t);
  a.insert(a.end(), {18, 2});
  replies.push_back(ask(a, 4));
  *proposed = counters.proposed;
  return replies;
}

TEST(HiddenStateDraftersInChat, RepliesAreThoseWithoutADrafter) {
  auto model = load_model(test::fixture("golden/kimi_k3_tiny"));
  const ModelInfo& t = model->info();
  for (const char* kind : {"dspark", "eagle3"}) {
    test::TempDir tmp;
    const std::string dir = tmp.file(kind);
    if (std::string(kind) == "dspark") {
      DSparkSynthOptions o = dspark_synth_for_target(t.hidden, t.vocab, t.n_layers);
      o.out_dir = dir;
      synthesize_dspark(o);
    } else {
      Eagle3SynthOptions o = eagle3_synth_for_target(t.hidden, t.vocab, t.n_layers);
      o.out_dir = dir;
      synthesize_eagle3(o);
    }
    DraftChoice c;
    c.model_dir = dir;
    for (double temperature : {0.0, 0.8}) {
      std::vector<int64_t> none, proposed;
      const auto want = converse(*model, nullptr, temperature, &none);
      const auto got = converse(*model, choose_drafter(c, *model), temperature, &proposed);
      EXPECT_EQ(got, want) << kind << ", temperature " << temperature;
      // It drafted in every request: the first turn, the second (after the
      // session went back into rows it took), the other conversation and the
      // first one's third turn (its state kept beside the other's).
      ASSERT_EQ(proposed.size(), 4u);
      for (size_t i = 0; i < 4; ++i) EXPECT_GT(proposed[i], 0) << kind << ", request " << i;
    }
  }
}

}  // namespace
}  // namespace sluice::chat::hidden_state_drafters_chat_test
