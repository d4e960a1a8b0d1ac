// One request's reply after its prompt: picks each token (logit bias, sampling,
// the JSON constraint), turns the tokens it takes into text (detokenizing, stop
// strings, the family's reply syntax) and hands the deltas to the request's
// writer. It owns no model state: whatever feeds the model (the one-request
// Generator now, a batching scheduler later) calls pick() with a position's
// logits and take() with the chosen token, then finish() once.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_codec.h"
#include "chat/generation_counters.h"
#include "chat/grammar.h"
#include "chat/token_mask.h"
#include "chat/reply_parser.h"
#include "chat/reply_replay.h"
#include "chat/generation_request.h"
#include "runtime/sampler.h"
#include "runtime/stop_strings.h"

namespace sluice::chat {

struct LogprobEntry {
  int32_t token = 0;
  double logprob = 0;
  std::vector<TokenLogprob> top;
};

struct Outcome {
  std::string finish_reason;  // "stop", "length", "tool_calls"; empty if cancelled
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  // Of completion_tokens, those generated inside the reasoning block (its end marker included).
  int64_t reasoning_tokens = 0;
  bool cancelled = false;
  // When the first token was generated (the epoch when none was), for the server's request log.
  std::chrono::steady_clock::time_point first_token_at{};
  // Prompt scoring (max_tokens 0 with logprobs): one entry per prompt token, each
  // token's log-probability given those before it; the first has none (NaN).
  std::vector<LogprobEntry> prompt_logprobs;
  // The reply as generated, for the server's replay of re-sent replies (chat/reply_replay.h).
  GeneratedReply generated;
};

// Output as it is released: returns false to cancel (client gone).
using EmitFn = std::function<bool(const ReplyDelta& delta, const std::vector<LogprobEntry>& logprobs)>;

class ReplyStream {
 public:
  // stop_ids: ids that end the reply (never shown). `alive` is polled once per token; false cancels.
  ReplyStream(const GenerationRequest& req, const ChatCodec& codec, const std::vector<int32_t>& prompt,
              std::vector<int32_t> stop_ids, int64_t vocab, GenerationCounters& counters, EmitFn emit,
              std::function<bool()> alive);

  int32_t pick(float* logits);  // a runtime TokenPicker: once per emitted token, in order
  bool take(int32_t token);     // a runtime TokenSink: false ends the reply after this token
  // After the last take(): releases held text and fills `out` (finish reason, completion tokens).
  void finish(Outcome& out);
  bool cancelled() const { return cancelled_; }
  void cancel() { cancelled_ = true; }

 private:
  bool release(const std::string& text, bool final);
  bool is_stop(int32_t t) const;
  bool allowed(int32_t t) const;

  const GenerationRequest& req_;
  const ChatCodec& codec_;
  std::vector<int32_t> stop_ids_;
  int64_t vocab_;
  std::shared_ptr<const VocabByBytes> by_bytes_;  // built at the first masked step
  GenerationCounters& counters_;
  EmitFn emit_;
  std::function<bool()> alive_;
  Sampler sampler_;
  std::unique_ptr<Detokenizer> detok_;
  StopMatcher stops_;
  ReplyParser parser_;
  std::optional<GrammarCursor> grammar_;  // structured output: every token keeps the reply in the grammar
  std::vector<LogprobEntry> pending_lp_;
  Sample picked_;
  int calls_emitted_ = 0;
  int64_t completion_tokens_ = 0;
  int64_t reasoning_tokens_ = 0;
  GeneratedReply generated_;
  bool stopped_ = false, cancelled_ = false;
  std::chrono::steady_clock::time_point last_, first_token_at_{};
};

}  // namespace sluice::chat
