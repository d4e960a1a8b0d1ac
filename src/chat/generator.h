// Runs one validated request on the model at a time: reuses the previous
// conversation's state when the new prompt shares its prefix (prefill), then
// decodes, plain or speculative, through the request's ReplyStream (which picks
// tokens and releases the reply). The two halves are separate calls, so a
// scheduler that batches several requests can use prefill() per request and
// drive each request's ReplyStream from its own decode loop.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chat/chat_codec.h"
#include "chat/generation_counters.h"
#include "chat/prefill_pacer.h"
#include "chat/reply_stream.h"
#include "chat/generation_request.h"
#include "model/model.h"
#include "runtime/prompt_cache.h"
#include "runtime/session.h"
#include "runtime/speculative.h"

namespace sluice::chat {

class Generator {
 public:
  // context_length: positions a conversation may use (0: unbounded).
  // prefill_chunk: prompt tokens per prefill pass (Engine::prefill_chunk(),
  // the memory plan's; a gone client is noticed between chunks). With a
  // drafter, its drafts are verified in batches (the output is the same).
  // `cache`: how many conversations are kept for prefix reuse, and where
  // prompt states are saved (runtime/prompt_cache.h). prefill_slice_seconds:
  // with a positive target, prefill chunks are sized to take about that long
  // (chat/prefill_pacer.h), at most prefill_chunk tokens. prefill_span: longer
  // prompt pieces go layer by layer in spans of up to this many tokens (Session
  // spans; -1: the model's prefill_span(), 0: none); a piece is then a span,
  // and the pacer's limit with it.
  Generator(const Model& model, const ChatCodec& codec, GenerationCounters& counters, int64_t context_length,
            std::shared_ptr<Drafter> drafter = nullptr, const SpeculationOptions& speculation = {},
            PromptCacheOptions cache = {}, int64_t prefill_chunk = 64, double prefill_slice_seconds = 0,
            int64_t prefill_span = -1);

  // Context budget checks before queueing: throws ApiError(400) when the prompt does not fit.
  int64_t max_new_tokens(const GenerationRequest& req, int64_t prompt_tokens) const;

  // Not thread-safe: one call at a time (the queue sees to it). `alive` is polled
  // before each prefill chunk, between the layers of each prefill pass and once
  // per token; false cancels.
  // `progress` (optional) hears the prompt positions in the state after each prefill chunk.
  using Progress = std::function<void(int64_t done, int64_t total)>;
  Outcome run(const GenerationRequest& req, const std::vector<int32_t>& prompt, const EmitFn& emit,
              const std::function<bool()>& alive = {}, const Progress& progress = {});

  // The first half of run(): the prompt in a session that reuses the longest
  // prefix a cached conversation or saved state shares with it, returning
  // the last position's logits; with a prompt cache directory the state
  // before the last token is saved there. Sets out.cached_tokens;
  // out.cancelled when `alive` said stop.
  // `boundaries`: prompt positions worth a checkpoint (GenerationRequest::prompt_boundaries).
  std::vector<float> prefill(const std::vector<int32_t>& prompt, const std::function<bool()>& alive, Outcome& out,
                             const Progress& progress = {}, const std::vector<int64_t>& boundaries = {});

  // The same prefill in steps, for a caller that interleaves it with other
  // work (the batch scheduler feeds one slice of a long prompt between the
  // decode steps of the requests beside it). begin_prefill() takes the
  // conversation sharing the longest prefix (sets out.cached_tokens; the
  // conversation prefill() left running is not touched); each prefill_step()
  // feeds one chunk (about the prefill slice's seconds, at most the plan's
  // chunk) and returns true once the prompt is in (`logits` then holds its last
  // position's) or `alive` said stop (out.cancelled; the conversation keeps the
  // chunks fed). The chunk lengths change no logit.
  struct PendingPrefill {
    CachedConversation conv;
    size_t fed = 0;  // prompt tokens in the state
    std::vector<int64_t> save_at;
    PrefillPacer pacer;
    std::chrono::steady_clock::time_point t0;
    std::vector<float> logits;
  };
  PendingPrefill begin_prefill(const std::vector<int32_t>& prompt, Outcome& out,
                               const std::vector<int64_t>& boundaries = {});
  bool prefill_step(PendingPrefill& p, const std::vector<int32_t>& prompt, const std::function<bool()>& alive,
                    Outcome& out, const Progress& progress = {});

  // Prompt scoring: each prompt token's log-probability (and the `top` most likely
  // alternatives) given the tokens before it, from the logits at every position of a
  // fresh session fed in chunks (the same bits as any other chunking); the first
  // token's is NaN. The kept conversation is not touched. Sets out.cancelled when
  // `alive` said stop.
  std::vector<LogprobEntry> score(const std::vector<int32_t>& prompt, int top, const std::function<bool()>& alive,
                                  Outcome& out);

  // The conversation prefill() left running, for a caller that decodes it
  // itself (the batch scheduler); it goes back to the prompt cache with keep().
  CachedConversation take_conversation();
  void keep(CachedConversation c) { cache_.keep(std::move(c)); }
  // Sets the prompt-cache gauges: the kept conversations plus `running` ones
  // decoding elsewhere (the batch scheduler's) with `running_bytes` of state.
  void report_cache(int64_t running, uint64_t running_bytes);

  // The ids that end a reply: the model's eos ids and the codec's end-of-turn ids.
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }

 private:
  const Model& model_;
  const ChatCodec& codec_;
  GenerationCounters& counters_;
  PromptCache cache_;          // conversations kept for prefix reuse
  CachedConversation current_;  // the last request's, given back to cache_ by the next
  std::vector<int32_t> stop_ids_;
  int64_t context_;
  int64_t prefill_chunk_;
  double prefill_slice_;
  int64_t prefill_span_;
  std::shared_ptr<Drafter> drafter_;  // null: no speculation
  SpeculationOptions speculation_;
};

}  // namespace sluice::chat
