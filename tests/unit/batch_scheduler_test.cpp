// The server's continuous batching (chat::BatchScheduler) gives every request
// exactly the reply it gets alone (chat::Generator::run, the --parallel 1
// path): the same text, finish reason, token counts and log-probabilities,
// greedy and seeded, on every golden architecture and the shipped K3 model,
// with requests joining and leaving at different passes (different prompt
// lengths and max_tokens, one ending at a stop string, one cancelled by its
// client, one reusing a cached prompt, more requests than slots).
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "chat/batch_scheduler.h"
#include "chat/chat_codec.h"
#include "chat/generator.h"
#include "engine/engine.h"
#include "server/batch_runner.h"
#include "support/id_codec.h"
#include "support/test_support.h"

namespace sluice::chat::batch_scheduler_test {
namespace {

using test::IdCodec;

struct Case {
  GenerationRequest req;
  std::vector<int32_t> prompt;
  int64_t join = 0;        // step at which it is added
  int64_t cancel_at = -1;  // its client leaves after this many released pieces (-1: never)
};

// What a client sees.
struct Seen {
  std::string text;
  std::vector<std::pair<int32_t, double>> logprobs;
  Outcome out;
  bool done = false;
  int64_t done_at = -1;  // the scheduler step it ended in
};

// The callbacks of one request: what it releases goes to `seen`, and the
// client leaves after `cancel_at` pieces.
struct Client {
  Seen seen;
  int64_t pieces = 0, cancel_at = -1;
  EmitFn emit() {
    return [this](const ReplyDelta& d, const std::vector<LogprobEntry>& lp) {
      seen.text += d.content;
      for (const auto& e : lp) seen.logprobs.push_back({e.token, e.logprob});
      return !(cancel_at >= 0 && ++pieces >= cancel_at);
    };
  }
  std::function<bool()> alive() {
    return [this] { return !(cancel_at >= 0 && pieces >= cancel_at); };
  }
};

Seen run_alone(const Model& m, const ChatCodec& codec, const Case& c) {
  GenerationCounters counters;
  Generator g(m, codec, counters, 0);
  Client cl;
  cl.cancel_at = c.cancel_at;
  cl.seen.out = g.run(c.req, c.prompt, cl.emit(), cl.alive());
  return cl.seen;
}

struct Together {
  std::vector<Seen> seen;
  int64_t passes = 0, most_running = 0, steps = 0;
};

// prefill_chunk: the prompt tokens of a prefill slice (one per step; no spans, which would make
// a slice as long as the model's span).
Together run_together(const Model& m, const ChatCodec& codec, const std::vector<Case>& cases, int64_t parallel,
                      int64_t prefill_chunk = 64) {
  GenerationCounters counters;
  PromptCacheOptions cache;
  cache.slots = 4;
  Generator g(m, codec, counters, 0, nullptr, {}, cache, prefill_chunk, 0, /*prefill_span=*/0);
  BatchScheduler sched(m, codec, g, counters, parallel);
  std::vector<Client> clients(cases.size());
  Together t;
  int64_t added = 0;
  int64_t step = 0;
  for (; added < int64_t(cases.size()) || !sched.idle(); ++step) {
    for (size_t i = 0; i < cases.size(); ++i) {
      if (cases[i].join != step) continue;
      Client& cl = clients[i];
      cl.cancel_at = cases[i].cancel_at;
      BatchScheduler::Job j;
      j.req = &cases[i].req;
      j.prompt = cases[i].prompt;
      j.emit = cl.emit();
      j.alive = cl.alive();
      j.done = [&cl, &step](const Outcome& o, std::exception_ptr e) {
        EXPECT_FALSE(e) << "the request failed";
        EXPECT_FALSE(cl.seen.done) << "done twice";
        cl.seen.out = o;
        cl.seen.done = true;
        cl.seen.done_at = step;
      };
      sched.add(std::move(j));
      ++added;
    }
    sched.step();
    t.most_running = std::max(t.most_running, sched.running());
    ++t.steps;
    if (step > 10000) ADD_FAILURE() << "the scheduler never became idle";
    if (step > 10000) break;
  }
  t.passes = sched.passes();
  for (auto& cl : clients) t.seen.push_back(cl.seen);
  return t;
}

std::vector<int32_t> slice(const std::vector<int32_t>& ids, size_t at, size_t len) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < len; ++i) out.push_back(ids[(at + i) % ids.size()]);
  return out;
}

void check_every_reply_as_alone(const Model& m, const ChatCodec& codec, const std::vector<int32_t>& ids) {
  for (double temperature : {0.0, 0.8}) {
    const std::string label = temperature == 0 ? "greedy" : "seeded sampling";
    std::vector<Case> cases(6);
    cases[0].prompt = slice(ids, 0, 3), cases[0].req.max_tokens = 12;
    cases[1].prompt = slice(ids, 3, 9), cases[1].req.max_tokens = 5;
    cases[2].prompt = slice(ids, 1, 5), cases[2].req.max_tokens = 14, cases[2].join = 2;  // gets a stop string
    cases[3].prompt = slice(ids, 12, 2), cases[3].req.max_tokens = 20, cases[3].join = 3, cases[3].cancel_at = 4;
    cases[4].prompt = slice(ids, 0, 6), cases[4].req.max_tokens = 7, cases[4].join = 14;  // reuses case 0's prompt
    cases[5].prompt = slice(ids, 5, 4), cases[5].req.max_tokens = 9, cases[5].join = 1;  // waits for a slot
    cases[1].req.logprobs = true, cases[1].req.top_logprobs = 2;
    cases[5].req.logit_bias[ids[2]] = 3.5f;
    uint64_t seed = 11;
    for (Case& c : cases) {
      c.req.kind = GenerationRequest::Kind::Completion;
      c.req.prompt_is_ids = true;
      c.req.prompt_ids = c.prompt;
      c.req.sampling.temperature = temperature;
      c.req.sampling.top_p = temperature > 0 ? 0.95 : 1.0;
      c.req.sampling.seed = seed++;
    }
    // A stop string from the middle of case 2's reply: its reply ends there.
    const std::string free_text = run_alone(m, codec, cases[2]).text;
    ASSERT_GE(free_text.size(), 8u) << label;
    cases[2].req.stop = {free_text.substr(free_text.size() / 2, 3)};
    std::vector<Seen> alone;
    for (const Case& c : cases) alone.push_back(run_alone(m, codec, c));
    EXPECT_EQ(alone[2].out.finish_reason, "stop") << label;
    EXPECT_TRUE(alone[3].out.cancelled) << label;
    const Together together = run_together(m, codec, cases, 3);
    // Prompts fed 2 tokens a step, interleaved with the others' decode passes: the same replies.
    const Together sliced = run_together(m, codec, cases, 3, /*prefill_chunk=*/2);
    int64_t tokens = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const Seen& a = alone[i];
      const Seen& c = sliced.seen[i];
      EXPECT_TRUE(c.done) << label << ", sliced prefill, request " << i;
      EXPECT_EQ(c.text, a.text) << label << ", sliced prefill, request " << i;
      EXPECT_EQ(c.out.finish_reason, a.out.finish_reason) << label << ", sliced prefill, request " << i;
      EXPECT_EQ(c.logprobs, a.logprobs) << label << ", sliced prefill, request " << i;
      const Seen& b = together.seen[i];
      EXPECT_TRUE(b.done) << label << ", request " << i;
      EXPECT_EQ(b.text, a.text) << label << ", request " << i;
      EXPECT_EQ(b.out.finish_reason, a.out.finish_reason) << label << ", request " << i;
      EXPECT_EQ(b.out.cancelled, a.out.cancelled) << label << ", request " << i;
      EXPECT_EQ(b.out.completion_tokens, a.out.completion_tokens) << label << ", request " << i;
      EXPECT_EQ(b.out.prompt_tokens, a.out.prompt_tokens) << label << ", request " << i;
      EXPECT_EQ(b.logprobs, a.logprobs) << label << ", request " << i;  // exact doubles: the same logits
      tokens += a.out.completion_tokens;
    }
    EXPECT_FALSE(alone[1].logprobs.empty());
    EXPECT_GT(together.seen[4].out.cached_tokens, 0) << label << ": case 4 did not reuse case 0's prompt";
    EXPECT_EQ(together.most_running, 3) << label;
    // Each pass decodes a token for several requests (the first token of each comes from its prefill).
    EXPECT_LT(together.passes, tokens - int64_t(cases.size())) << label;
  }
}

class BatchScheduling : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchScheduling, EveryReplyIdenticalToRunningItAlone) {
  auto model = load_model(test::fixture("golden/" + GetParam()));
  std::vector<int32_t> ids;
  for (int64_t v : test::read_i64(test::fixture("golden/" + GetParam() + "/reference.safetensors"), "input_ids"))
    ids.push_back(int32_t(v));
  ASSERT_GE(ids.size(), 16u);
  IdCodec codec;
  check_every_reply_as_alone(*model, codec, ids);
}

INSTANTIATE_TEST_SUITE_P(Models, BatchScheduling,
                         ::testing::Values("deepseek_v3_tiny", "deepseek_v3_tiny_fp8", "deepseek_v3_tiny_int4",
                                           "qwen3_moe_tiny", "gpt_oss_tiny", "kimi_linear_tiny", "kimi_k3_tiny"));

// The shipped model with its own tokenizer: English prompts, text replies.
TEST(BatchSchedulingK3Mini, EveryReplyIdenticalToRunningItAlone) {
  const std::string dir = test::fixture("../../models/sluice-k3-mini");
  auto model = load_model(dir);
  auto codec = make_chat_codec(dir, model->info().vocab);
  const std::vector<int32_t> ids =
      codec->encode("In the beginning God created the heaven and the earth. And the earth was without form, and void");
  ASSERT_GE(ids.size(), 16u);
  check_every_reply_as_alone(*model, *codec, ids);
}

// Issue 38, finding 4: a long prompt is prefilled a slice per step, so a
// 1-token request that joins meanwhile ends long before the long prompt's
// prefill does (it used to wait for all of it), and both replies are the ones
// they get alone.
TEST(BatchSchedulingFairness, AShortRequestDoesNotWaitForALongPrefill) {
  auto model = load_model(test::fixture("golden/deepseek_v3_tiny"));
  std::vector<int32_t> ids;
  for (int64_t v : test::read_i64(test::fixture("golden/deepseek_v3_tiny/reference.safetensors"), "input_ids"))
    ids.push_back(int32_t(v));
  IdCodec codec;
  std::vector<Case> cases(2);
  cases[0].prompt = slice(ids, 0, 64), cases[0].req.max_tokens = 3;
  cases[1].prompt = slice(ids, 5, 3), cases[1].req.max_tokens = 1, cases[1].join = 2;
  for (Case& c : cases) {
    c.req.kind = GenerationRequest::Kind::Completion;
    c.req.prompt_is_ids = true;
    c.req.prompt_ids = c.prompt;
    c.req.sampling.temperature = 0;
  }
  const Together t = run_together(*model, codec, cases, 2, /*prefill_chunk=*/4);
  ASSERT_TRUE(t.seen[0].done && t.seen[1].done);
  // The long prompt takes 16 slices (63 tokens in 4s, then its last); the short one's whole stay is one step.
  EXPECT_EQ(t.seen[1].done_at, 2);
  EXPECT_GE(t.seen[0].done_at, 16);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(t.seen[i].text, run_alone(*model, codec, cases[i]).text) << i;
}

// The server's runner thread (in suite ServerQueue, which the TSan tree runs):
// requests submitted from several threads at once, each waiting for its own
// end as an HTTP worker does, get the replies they get alone.
TEST(ServerQueue, BatchRunnerServesRequestsFromManyThreads) {
  auto model = load_model(test::fixture("golden/kimi_k3_tiny"));
  IdCodec codec;
  std::vector<Case> cases(6);
  for (size_t i = 0; i < cases.size(); ++i) {
    Case& c = cases[i];
    c.prompt = {int32_t(5 + i), int32_t(40 + 3 * i), 7};
    c.req.kind = GenerationRequest::Kind::Completion;
    c.req.max_tokens = 4 + int64_t(i);
    c.req.sampling.temperature = i % 2 ? 0.8 : 0;
    c.req.sampling.seed = 100 + i;
  }
  std::vector<Seen> alone;
  for (const Case& c : cases) alone.push_back(run_alone(*model, codec, c));
  GenerationCounters counters;
  Generator g(*model, codec, counters, 0);
  BatchScheduler sched(*model, codec, g, counters, 3);
  std::vector<Seen> got(cases.size());
  {
    server::BatchRunner runner(sched);
    std::vector<std::thread> workers;
    for (size_t i = 0; i < cases.size(); ++i)
      workers.emplace_back([&, i] {
        std::mutex mu;
        std::condition_variable cv;
        bool finished = false;
        std::string text;  // written by the runner's thread, read here after the end
        BatchScheduler::Job j;
        j.req = &cases[i].req;
        j.prompt = cases[i].prompt;
        j.emit = [&text](const ReplyDelta& d, const std::vector<LogprobEntry>&) {
          text += d.content;
          return true;
        };
        j.done = [&](const Outcome& o, std::exception_ptr) {
          std::lock_guard lk(mu);
          got[i].out = o;
          finished = true;
          cv.notify_all();
        };
        runner.submit(std::move(j));
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return finished; });
        got[i].text = text;
      });
    for (auto& w : workers) w.join();
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(got[i].text, alone[i].text) << "request " << i;
    EXPECT_EQ(got[i].out.completion_tokens, alone[i].out.completion_tokens) << "request " << i;
    EXPECT_EQ(got[i].out.finish_reason, "length") << "request " << i;
  }
  EXPECT_GT(sched.passes(), 0);
}

// A request that does not fit the context fails alone; the others go on.
TEST(BatchSchedulingErrors, ARequestBeyondTheContextFailsAlone) {
  auto model = load_model(test::fixture("golden/qwen3_moe_tiny"));
  IdCodec codec;
  GenerationCounters counters;
  Generator g(*model, codec, counters, /*context_length=*/16);
  BatchScheduler sched(*model, codec, g, counters, 2);
  GenerationRequest ok, too_long;
  ok.kind = too_long.kind = GenerationRequest::Kind::Completion;
  ok.sampling.temperature = too_long.sampling.temperature = 0;
  ok.max_tokens = 4;
  too_long.max_tokens = 40;
  int done = 0;
  bool failed = false;
  Outcome ok_out;
  auto add = [&](const GenerationRequest& r, std::function<void(const Outcome&, std::exception_ptr)> d) {
    BatchScheduler::Job j;
    j.req = &r;
    j.prompt = {5, 6, 7};
    j.emit = [](const ReplyDelta&, const std::vector<LogprobEntry>&) { return true; };
    j.done = std::move(d);
    sched.add(std::move(j));
  };
  add(too_long, [&](const Outcome&, std::exception_ptr e) { failed = e != nullptr, ++done; });
  add(ok, [&](const Outcome& o, std::exception_ptr e) {
    EXPECT_FALSE(e);
    ok_out = o;
    ++done;
  });
  for (int i = 0; i < 100 && !sched.idle(); ++i) sched.step();
  EXPECT_EQ(done, 2);
  EXPECT_TRUE(failed);
  EXPECT_EQ(ok_out.completion_tokens, 4);
  EXPECT_EQ(ok_out.finish_reason, "length");
}

}  // namespace
}  // namespace sluice::chat::batch_scheduler_test
