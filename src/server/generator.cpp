#include "server/generator.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "runtime/stop_strings.h"
#include "server/api_error.h"
#include "server/json_prefix.h"

namespace sluice::server {

namespace {
using Clock = std::chrono::steady_clock;
// Prompt tokens fed between two checks for a gone client (the session's own chunk size).
constexpr size_t kPrefillChunk = 64;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

Generator::Generator(const Model& model, const ChatCodec& codec, Metrics& metrics, int64_t context_length,
                     std::shared_ptr<Drafter> drafter, const SpeculationOptions& speculation)
    : model_(model),
      codec_(codec),
      metrics_(metrics),
      context_(context_length),
      drafter_(std::move(drafter)),
      speculation_(speculation) {
  stop_ids_ = model.info().eos_ids;
  for (int32_t id : codec.stop_ids())
    if (std::find(stop_ids_.begin(), stop_ids_.end(), id) == stop_ids_.end()) stop_ids_.push_back(id);
}

int64_t Generator::max_new_tokens(const Request& req, int64_t prompt_tokens) const {
  const int64_t ctx = context_;
  if (prompt_tokens <= 0) bad_field(req.kind == Request::Kind::Chat ? "messages" : "prompt", "the prompt is empty");
  if (ctx <= 0) return req.max_tokens.value_or(int64_t(1) << 20);
  if (prompt_tokens >= ctx)
    throw ApiError(400, "invalid_request_error", req.kind == Request::Kind::Chat ? "messages" : "prompt",
                   "context_length_exceeded",
                   fmt::format("this model's context length is {} tokens, and the prompt has {}", ctx, prompt_tokens));
  if (req.max_tokens && prompt_tokens + *req.max_tokens > ctx)
    throw ApiError(400, "invalid_request_error", "max_tokens", "context_length_exceeded",
                   fmt::format("this model's context length is {} tokens: the prompt ({}) plus max_tokens ({}) exceeds it",
                               ctx, prompt_tokens, *req.max_tokens));
  return req.max_tokens.value_or(ctx - prompt_tokens);
}

Outcome Generator::run(const Request& req, const std::vector<int32_t>& prompt, const EmitFn& emit,
                       const std::function<bool()>& alive) {
  Outcome out;
  out.prompt_tokens = int64_t(prompt.size());
  const int64_t max_new = max_new_tokens(req, out.prompt_tokens);

  // Prefix reuse. The kept session holds the last prompt and what was generated after
  // it, with a rollback point just before the prompt's last token. A new prompt that
  // extends all of it feeds only the rest; one that shares at least the last prompt
  // (all but its final token) rolls the generated part back to where they agree.
  const auto t0 = Clock::now();
  const size_t P = prompt.size();
  size_t start = 0;  // prompt tokens already in the state
  if (session_) {
    const auto& st = session_->tokens();
    size_t common = 0;
    while (common < st.size() && common < P && st[common] == prompt[common]) ++common;
    if (common == st.size() && common < P) {
      start = common;
      if (checkpoint_ >= 0) session_->commit();  // the old rollback point is not needed any more
    } else if (checkpoint_ >= 0 && common >= size_t(checkpoint_)) {
      const size_t keep = std::min(common, P - 1) - size_t(checkpoint_);
      session_->rollback(int64_t(keep));
      start = size_t(checkpoint_) + keep;
    } else {
      session_.reset();
    }
  }
  if (!session_) session_ = std::make_unique<Session>(model_);
  out.cached_tokens = int64_t(start);
  std::vector<float> logits;
  try {
    // Everything but the last token, in chunks with a check for a gone client or a
    // stopping server between them; then the rollback point, then the last token.
    for (size_t b = start; b + 1 < P; b += kPrefillChunk) {
      if (alive && !alive()) {  // the session keeps the prefix fed so far (a later request may extend it)
        checkpoint_ = -1;
        out.cancelled = true;
        return out;
      }
      const size_t e = std::min(b + kPrefillChunk, P - 1);
      session_->feed(std::vector<int32_t>(prompt.begin() + std::ptrdiff_t(b), prompt.begin() + std::ptrdiff_t(e)));
    }
    // Kept open over the whole generation: no per-token records (a later
    // rollback into the reply feeds the kept part again on recurrent models).
    session_->checkpoint(/*record=*/false);
    checkpoint_ = int64_t(P) - 1;
    logits = session_->feed({prompt.back()});
  } catch (...) {
    session_.reset();
    checkpoint_ = -1;
    throw;
  }
  metrics_.add_prompt(out.prompt_tokens, out.cached_tokens, seconds_since(t0));

  Sampler sampler(req.sampling);
  auto detok = codec_.detokenizer();
  StopMatcher stops(req.stop);
  ReplySyntax syntax;
  if (req.kind == Request::Kind::Chat) {
    syntax = codec_.reply_syntax(prompt);
  } else {
    syntax.think_begin.clear();  // completions return the raw text
    syntax.think_end.clear();
  }
  ReplyParser parser(syntax, req.kind == Request::Kind::Chat && req.tools.is_array());
  std::vector<LogprobEntry> pending_lp;
  const int64_t V = model_.info().vocab;

  int calls_emitted = 0;
  auto release = [&](const std::string& text, bool final) -> bool {
    ReplyDelta d = parser.push(text);
    if (final) d.append(parser.finish());
    if (!req.parallel_tool_calls) {
      // Only the first call is returned when the client asked for one call at a time.
      if (calls_emitted > 0) d.tool_calls.clear();
      if (d.tool_calls.size() > 1) d.tool_calls.resize(1);
    }
    calls_emitted += int(d.tool_calls.size());
    if (d.empty() && !final) return true;
    std::vector<LogprobEntry> lp;
    if (!text.empty() || final) lp.swap(pending_lp);
    return emit(d, lp);
  };

  // JSON mode: every token must keep the reply a prefix of one JSON object.
  std::optional<JsonPrefix> json;
  if (req.json_object) json.emplace();
  auto is_stop = [&](int32_t t) { return std::find(stop_ids_.begin(), stop_ids_.end(), t) != stop_ids_.end(); };
  auto json_ok = [&](int32_t t) {
    if (is_stop(t)) return false;  // the object is not finished yet
    const std::string b = codec_.token_bytes(t);
    JsonPrefix next = *json;
    return !b.empty() && next.feed(b);
  };

  // One token at a time through the same picker and sink, speculating or not:
  // the picker applies the logit bias, samples (within the JSON grammar when asked),
  // the sink releases text and decides whether to go on.
  bool stopped = false;
  Sample picked;
  auto pick = [&](float* row) {
    for (const auto& [id, bias] : req.logit_bias) row[size_t(id)] += bias;
    picked = sampler.sample(row, V);
    if (json && !json_ok(picked.token)) picked = sampler.sample(row, V, json_ok);
    return picked.token;
  };
  auto last = Clock::now();
  auto took = [&] {  // time since the previous token: a verification pass is shared by its tokens
    const auto now = Clock::now();
    metrics_.add_token(std::chrono::duration<double>(now - last).count());
    last = now;
  };
  auto take = [&](int32_t token) {
    if (json && !is_stop(token)) json->feed(codec_.token_bytes(token));
    ++out.completion_tokens;
    if (req.logprobs) pending_lp.push_back({token, picked.logprob, std::move(picked.top)});
    took();
    if (out.completion_tokens % 16 == 0) metrics_.set_expert_stats(model_.expert_stats());
    if (is_stop(token)) {
      stopped = true;
      return false;
    }
    const std::string text = stops.push(detok->push(token));
    if (stops.stopped()) {
      stopped = true;
      if (!release(text, false)) out.cancelled = true;
      return false;
    }
    if (!release(text, false) || (alive && !alive())) {
      out.cancelled = true;
      return false;
    }
    if (json && json->complete()) {  // the object is closed: nothing may follow
      stopped = true;
      return false;
    }
    return true;
  };
  if (alive && !alive()) {
    out.cancelled = true;
  } else {
    SpeculationStats spec;
    try {
      decode(*session_, std::move(logits), prompt, max_new, pick, take, drafter_.get(), speculation_, &spec);
    } catch (...) {
      session_.reset();
      checkpoint_ = -1;
      throw;
    }
    if (drafter_) metrics_.add_speculation(spec.passes, spec.proposed, spec.accepted);
  }
  metrics_.set_expert_stats(model_.expert_stats());
  if (out.cancelled) return out;
  std::string tail;
  if (!stops.stopped()) {
    tail = stops.push(detok->flush());
    tail += stops.flush();
  }
  if (!release(tail, true)) {
    out.cancelled = true;
    return out;
  }
  // Cut off by max_tokens is "length", even in the middle of a tool call.
  out.finish_reason = !stopped ? "length" : parser.calls_seen() > 0 ? "tool_calls" : "stop";
  return out;
}

}  // namespace sluice::server
