#include "chat/generator.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "chat/api_error.h"
#include "util/cancelled.h"

namespace sluice::chat {

namespace {
using Clock = std::chrono::steady_clock;
// Prompt tokens per pass of prompt scoring (each returns every position's logits).
constexpr size_t kScoreChunk = 64;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

Generator::Generator(const Model& model, const ChatCodec& codec, GenerationCounters& counters, int64_t context_length,
                     std::shared_ptr<Drafter> drafter, const SpeculationOptions& speculation, PromptCacheOptions cache,
                     int64_t prefill_chunk, double prefill_slice_seconds, int64_t prefill_span)
    : model_(model),
      codec_(codec),
      counters_(counters),
      cache_(model, std::move(cache)),
      context_(context_length),
      prefill_chunk_(std::max<int64_t>(1, prefill_chunk)),
      prefill_slice_(prefill_slice_seconds),
      prefill_span_(prefill_span),
      drafter_(std::move(drafter)),
      speculation_(speculation) {
  stop_ids_ = model.info().eos_ids;
  for (int32_t id : codec.stop_ids())
    if (std::find(stop_ids_.begin(), stop_ids_.end(), id) == stop_ids_.end()) stop_ids_.push_back(id);
  report_cache(0, 0);
}

void Generator::report_cache(int64_t running, uint64_t running_bytes) {
  counters_.set_prompt_cache(cache_.slots_in_memory() + running, cache_.memory_bytes() + running_bytes, cache_.files(),
                             cache_.disk_bytes());
  counters_.set_prompt_checkpoints(cache_.checkpoints(), cache_.checkpoint_bytes());
}

int64_t Generator::max_new_tokens(const GenerationRequest& req, int64_t prompt_tokens) const {
  const int64_t ctx = context_;
  if (prompt_tokens <= 0) bad_field(req.kind == GenerationRequest::Kind::Chat ? "messages" : "prompt", "the prompt is empty");
  if (ctx <= 0) return req.max_tokens.value_or(int64_t(1) << 20);
  // OpenAI's wording (the Anthropic route words these its own way before they get here).
  const bool chat = req.kind == GenerationRequest::Kind::Chat;
  if (prompt_tokens >= ctx)
    throw ApiError(400, "invalid_request_error", chat ? "messages" : "prompt", "context_length_exceeded",
                   fmt::format("This model's maximum context length is {} tokens. However, your {} resulted in {} "
                               "tokens. Please reduce the length of the {}.",
                               ctx, chat ? "messages" : "prompt", prompt_tokens, chat ? "messages" : "prompt"));
  if (req.max_tokens && prompt_tokens + *req.max_tokens > ctx)
    throw ApiError(400, "invalid_request_error", "max_tokens", "context_length_exceeded",
                   fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                               "({} in the {}, {} in the completion). Please reduce the length of the {} or completion.",
                               ctx, prompt_tokens + *req.max_tokens, prompt_tokens, chat ? "messages" : "prompt",
                               *req.max_tokens, chat ? "messages" : "prompt"));
  return req.max_tokens.value_or(ctx - prompt_tokens);
}

std::vector<float> Generator::prefill(const std::vector<int32_t>& prompt, const std::function<bool()>& alive,
                                     Outcome& out, const Progress& progress, const std::vector<int64_t>& boundaries) {
  if (current_.session) cache_.keep(std::move(current_));
  PendingPrefill p = begin_prefill(prompt, out, boundaries);
  while (!prefill_step(p, prompt, alive, out, progress)) {
  }
  current_ = std::move(p.conv);
  return std::move(p.logits);
}

Generator::PendingPrefill Generator::begin_prefill(const std::vector<int32_t>& prompt, Outcome& out,
                                                   const std::vector<int64_t>& boundaries) {
  // Prefix reuse. A kept conversation holds its prompt and what was generated
  // after it, with a rollback point just before the prompt's last token; the
  // cache picks the conversation or saved state sharing the longest prefix
  // and returns it extended, rolled back or cut to that prefix.
  PendingPrefill p{{}, 0, {}, PrefillPacer(prefill_chunk_, prefill_slice_), Clock::now(), {}};
  p.conv = cache_.take(prompt, boundaries);
  p.conv.session->set_prefill_chunk(prefill_chunk_);
  p.conv.session->set_prefill_span(prefill_span_);
  p.pacer = PrefillPacer(p.conv.session->prefill_piece(), prefill_slice_);  // a span when the model has them
  // A drafter reading the target's hidden rows (DSpark) gets them from every
  // pass from here on; a cached conversation that kept none drafts nothing.
  capture_for_drafter(*p.conv.session, drafter_.get());
  p.fed = p.conv.session->tokens().size();  // prompt tokens already in the state
  out.cached_tokens = int64_t(p.fed);
  p.save_at = cache_.save_points();
  return p;
}

bool Generator::prefill_step(PendingPrefill& p, const std::vector<int32_t>& prompt,
                             const std::function<bool()>& alive, Outcome& out, const Progress& progress) {
  Session& s = *p.conv.session;
  const size_t P = prompt.size();
  // Polled before each chunk and between the layers of each pass: a gone client
  // or a stopping server ends the prefill within one layer's work.
  const std::function<bool()> stop = [&alive] { return alive && !alive(); };
  try {
    // Everything but the last token, in chunks (the cache's save points as chunk
    // ends); then the rollback point, then the last token.
    if (p.fed + 1 < P) {
      const size_t b = p.fed;
      size_t e = std::min(b + size_t(p.pacer.next()), P - 1);
      for (int64_t sp : p.save_at)
        if (size_t(sp) > b && size_t(sp) < e) e = size_t(sp);
      try {
        const auto chunk_start = Clock::now();
        s.feed(std::vector<int32_t>(prompt.begin() + std::ptrdiff_t(b), prompt.begin() + std::ptrdiff_t(e)), stop);
        p.pacer.done(int64_t(e - b), seconds_since(chunk_start));
      } catch (const Cancelled&) {
        // The session keeps the chunks fed before this one (a later request may extend them).
        counters_.set_prefill_progress(0, 0);
        p.conv.mark = -1;
        out.cancelled = true;
        return true;
      }
      if (std::find(p.save_at.begin(), p.save_at.end(), int64_t(e)) != p.save_at.end()) cache_.save(s);
      counters_.set_prefill_progress(int64_t(e), int64_t(P));
      if (progress) progress(int64_t(e), int64_t(P));
      p.fed = e;
      if (p.fed + 1 < P) return false;
    }
    counters_.set_prefill_progress(0, 0);
    cache_.save(s);  // the prompt but its last token: what a repeat of it reuses
    // Kept open over the whole generation: no per-token records (a later
    // rollback into the reply feeds the kept part again on recurrent models).
    s.checkpoint(/*record=*/false);
    p.conv.mark = int64_t(P) - 1;
    p.logits = s.feed({prompt.back()});
    p.fed = P;
  } catch (...) {
    p.conv = {};
    throw;
  }
  counters_.add_prompt(int64_t(P), out.cached_tokens, seconds_since(p.t0));
  // The running conversation counts as a slot and its state as memory.
  report_cache(1, uint64_t(s.state_bytes()));
  return true;
}

CachedConversation Generator::take_conversation() {
  CachedConversation c = std::move(current_);
  current_ = {};
  return c;
}

std::vector<LogprobEntry> Generator::score(const std::vector<int32_t>& prompt, int top,
                                          const std::function<bool()>& alive, Outcome& out) {
  const auto t0 = Clock::now();
  const int64_t vocab = model_.info().vocab;
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.top_logprobs = top;
  Sampler sampler(greedy);
  std::vector<LogprobEntry> entries;
  entries.push_back({prompt.empty() ? 0 : prompt[0], std::numeric_limits<double>::quiet_NaN(), {}});
  Session s(model_);
  for (size_t b = 0; b < prompt.size(); b += kScoreChunk) {
    if (alive && !alive()) {
      out.cancelled = true;
      return {};
    }
    const size_t e = std::min(b + kScoreChunk, prompt.size());
    const std::vector<float> rows =
        s.feed_all(std::vector<int32_t>(prompt.begin() + std::ptrdiff_t(b), prompt.begin() + std::ptrdiff_t(e)));
    for (size_t i = b; i < e && i + 1 < prompt.size(); ++i) {
      // The sampler's own log-softmax and ranking, with only the prompt's next token allowed.
      const int32_t next = prompt[i + 1];
      Sample smp = sampler.sample(rows.data() + (i - b) * size_t(vocab), vocab, [next](int32_t t) { return t == next; });
      entries.push_back({next, smp.logprob, std::move(smp.top)});
    }
  }
  counters_.add_prompt(int64_t(prompt.size()), 0, seconds_since(t0));
  return entries;
}

Outcome Generator::run(const GenerationRequest& req, const std::vector<int32_t>& prompt, const EmitFn& emit,
                       const std::function<bool()>& alive, const Progress& progress) {
  Outcome out;
  out.prompt_tokens = int64_t(prompt.size());
  const int64_t max_new = max_new_tokens(req, out.prompt_tokens);
  if (max_new == 0) {  // prompt scoring: nothing is generated
    if (req.logprobs) out.prompt_logprobs = score(prompt, req.top_logprobs, alive, out);
    if (!out.cancelled) out.finish_reason = "length";
    return out;
  }
  std::vector<float> logits = prefill(prompt, alive, out, progress, req.prompt_boundaries);
  if (out.cancelled) return out;

  ReplyStream reply(req, codec_, prompt, stop_ids_, model_.info().vocab, counters_, emit, alive);
  int64_t taken = 0;
  auto pick = [&](float* row) { return reply.pick(row); };
  auto take = [&](int32_t token) {
    if (++taken % 16 == 0) counters_.set_expert_stats(model_.expert_stats());
    return reply.take(token);
  };
  if (alive && !alive()) {
    reply.cancel();
  } else {
    SpeculationStats spec;
    try {
      decode(*current_.session, std::move(logits), prompt, max_new, pick, take, drafter_.get(), speculation_, &spec);
    } catch (...) {
      current_ = {};
      throw;
    }
    if (drafter_) counters_.add_speculation(spec);
  }
  counters_.set_expert_stats(model_.expert_stats());
  reply.finish(out);
  return out;
}

}  // namespace sluice::chat
