// Continuous batching: up to `parallel` requests decoded together, one forward
// pass for all of them per step (Session::feed_together: each layer's weights
// and the union of the requests' experts read once).
//
// One step():
//  1. Admission. Requests added since the last step join, in order, while
//     fewer than `parallel` run (those being prefilled count). A joining
//     request's prefill begins (Generator::begin_prefill: prefix reuse from
//     the prompt cache).
//  1b. Prefill slices. Each request whose prompt is not yet in is fed one
//     slice of it (Generator::prefill_step: one chunk of about --prefill-slice
//     seconds, at most the plan's chunk; a gone client stops it within a
//     layer). Once its prompt is in, its first token is picked from the
//     prompt's last logits and it decodes from the next pass on. So a long
//     prompt holds the requests beside it for one slice per step, not for its
//     whole prefill: a request that joins meanwhile is prefilled and decoded
//     with at most one slice of each other prompt's between its steps.
//  2. Cancellation. A running request whose client went away (alive() false)
//     leaves before the pass.
//  3. The pass. Every running request's last picked token is fed together;
//     each request's ReplyStream picks its next token from its own row of
//     logits (its sampler and seed, logit bias, grammar) and takes it (stop
//     ids and strings, streaming). A request leaves when its reply ends, it
//     reaches max_tokens or its client is gone; its conversation goes back to
//     the prompt cache, as a request run alone does.
//
// Why every reply equals the reply the request gets alone (greedy or seeded):
// a sequence's logits in a batched pass are bit for bit its logits alone
// (Model::forward_batch), and each request picks from its own logits with its
// own sampler, once per token in order, exactly as plain decoding does; the
// last emitted token is never fed. The only difference is when the tokens
// come out. Speculative decoding is not batched: the server refuses
// --speculate with --parallel > 1.
#pragma once
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "chat/generator.h"
#include "chat/reply_stream.h"

namespace sluice::chat {

class BatchScheduler {
 public:
  struct Job {
    const GenerationRequest* req = nullptr;  // outlives the job (until done)
    std::vector<int32_t> prompt;
    EmitFn emit;                    // released text, on the scheduler's thread
    std::function<bool()> alive;    // polled per prefill chunk and per token; false cancels
    Generator::Progress progress;   // prefill progress (optional)
    // Called once when the request has left: its outcome, or what failed
    // (an ApiError for a request that does not fit the context).
    std::function<void(const Outcome&, std::exception_ptr)> done;
  };

  // `generator` prefills (and keeps conversations for prefix reuse); it must
  // not be used by anyone else while the scheduler runs.
  BatchScheduler(const Model& model, const ChatCodec& codec, Generator& generator, GenerationCounters& counters,
                 int64_t parallel);
  ~BatchScheduler();

  void add(Job job);  // joins at the next step
  // Admission, then one pass over the running requests (none when nothing runs).
  void step();
  bool idle() const { return waiting_.empty() && running_.empty(); }
  int64_t running() const { return int64_t(running_.size()); }
  int64_t waiting() const { return int64_t(waiting_.size()); }
  int64_t passes() const { return passes_; }  // batched decode passes so far

 private:
  struct Running;
  // A joining request: its prompt's prefill begins (the cached prefix found).
  void admit(Job job);
  // One slice of r's prefill; once the prompt is in, its first token. False: r has left.
  bool prefill_slice(Running& r);
  // Picks and takes the token at `row`; false: the request leaves (not fed).
  bool emit(Running& r, std::vector<float>& row);
  void finish(Running& r);
  // f() for a running request; when it throws, the request ends with the error. Returns f's
  // result (true: the request stays), false after an error.
  bool guarded(Running& r, const std::function<bool()>& f);
  void fail_batch(std::exception_ptr e);
  void report_cache();

  const Model& model_;
  const ChatCodec& codec_;
  Generator& generator_;
  GenerationCounters& counters_;
  int64_t parallel_;
  std::deque<Job> waiting_;
  std::vector<std::unique_ptr<Running>> running_;
  int64_t passes_ = 0;
};

}  // namespace sluice::chat
