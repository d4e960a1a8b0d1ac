// Runs one validated request on the model: reuses the previous conversation's
// state when the new prompt extends it, samples, detokenises, applies stop
// strings and splits the reply (content / reasoning / tool calls) as it goes.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "server/chat_codec.h"
#include "server/metrics.h"
#include "server/request.h"

namespace sluice::server {

struct LogprobEntry {
  int32_t token = 0;
  double logprob = 0;
  std::vector<TokenLogprob> top;
};

struct Outcome {
  std::string finish_reason;  // "stop", "length", "tool_calls"; empty if cancelled
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  bool cancelled = false;
};

// Output as it is released: returns false to cancel (client gone).
using EmitFn = std::function<bool(const ReplyDelta& delta, const std::vector<LogprobEntry>& logprobs)>;

class Generator {
 public:
  // context_length: positions a conversation may use (0: unbounded). With a
  // drafter, its drafts are verified in batches (the output is the same).
  Generator(const Model& model, const ChatCodec& codec, Metrics& metrics, int64_t context_length,
            std::shared_ptr<Drafter> drafter = nullptr, const SpeculationOptions& speculation = {});

  // Context budget checks before queueing: throws ApiError(400) when the prompt does not fit.
  int64_t max_new_tokens(const Request& req, int64_t prompt_tokens) const;

  // Not thread-safe: one call at a time (the queue sees to it). `alive` is polled
  // once per token; false cancels.
  Outcome run(const Request& req, const std::vector<int32_t>& prompt, const EmitFn& emit,
              const std::function<bool()>& alive = {});

 private:
  const Model& model_;
  const ChatCodec& codec_;
  Metrics& metrics_;
  std::unique_ptr<Session> session_;  // the last conversation, kept for prefix reuse
  int64_t checkpoint_ = -1;           // session_'s rollback point (tokens before it), -1: none
  std::vector<int32_t> stop_ids_;
  int64_t context_;
  std::shared_ptr<Drafter> drafter_;  // null: no speculation
  SpeculationOptions speculation_;
};

}  // namespace sluice::server
