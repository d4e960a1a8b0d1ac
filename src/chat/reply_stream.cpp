#include "chat/reply_stream.h"

#include <algorithm>

namespace sluice::chat {

ReplyStream::ReplyStream(const GenerationRequest& req, const ChatCodec& codec, const std::vector<int32_t>& prompt,
                         std::vector<int32_t> stop_ids, int64_t vocab, GenerationCounters& counters, EmitFn emit,
                         std::function<bool()> alive)
    : req_(req),
      codec_(codec),
      stop_ids_(std::move(stop_ids)),
      vocab_(vocab),
      counters_(counters),
      emit_(std::move(emit)),
      alive_(std::move(alive)),
      sampler_(req.sampling),
      detok_(codec.detokenizer()),
      stops_(req.stop),
      parser_(
          [&] {
            if (req.kind == GenerationRequest::Kind::Chat) return codec.reply_syntax(prompt);
            ReplySyntax s;  // completions return the raw text
            s.think_begin.clear();
            s.think_end.clear();
            return s;
          }(),
          req.kind == GenerationRequest::Kind::Chat && req.tools.is_array()),
      last_(std::chrono::steady_clock::now()) {
  if (req.grammar) grammar_.emplace(req.grammar);
}

bool ReplyStream::is_stop(int32_t t) const {
  return std::find(stop_ids_.begin(), stop_ids_.end(), t) != stop_ids_.end();
}

bool ReplyStream::allowed(int32_t t) const {
  if (is_stop(t)) return grammar_->complete();  // the reply may end only where the grammar does
  return grammar_->allows(codec_.token_bytes(t));
}

bool ReplyStream::release(const std::string& text, bool final) {
  ReplyDelta d = parser_.push(text);
  // Cut off by max_tokens (not stopped): a call still being written is dropped.
  if (final) d.append(parser_.finish(/*cut=*/!stopped_));
  if (!req_.parallel_tool_calls) {
    // Only the first call is returned when the client asked for one call at a time.
    if (calls_emitted_ > 0) d.tool_calls.clear();
    if (d.tool_calls.size() > 1) d.tool_calls.resize(1);
    std::erase_if(d.call_parts, [](const ToolCallPart& p) { return p.index > 0; });
  }
  calls_emitted_ += int(d.tool_calls.size());
  generated_.content += d.content;
  generated_.reasoning += d.reasoning;
  generated_.calls.insert(generated_.calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  if (d.empty() && !final) return true;
  std::vector<LogprobEntry> lp;
  if (!text.empty() || final) lp.swap(pending_lp_);
  return emit_(d, lp);
}

int32_t ReplyStream::pick(float* row) {
  for (const auto& [id, bias] : req_.logit_bias) row[size_t(id)] += bias;
  picked_ = sampler_.sample(row, vocab_);
  if (grammar_ && !allowed(picked_.token)) {
    // The whole vocabulary's mask in one walk (chat/token_mask.h); the stop ids
    // take allowed()'s rule (the reply ends only where the grammar is complete).
    if (!by_bytes_) by_bytes_ = VocabByBytes::of(codec_, vocab_);
    std::vector<char> mask = by_bytes_->allowed(*grammar_);
    for (int32_t id : stop_ids_)
      if (id >= 0 && id < vocab_) mask[size_t(id)] = allowed(id);
    picked_ = sampler_.sample(row, vocab_, [&mask](int32_t t) { return mask[size_t(t)] != 0; });
  }
  return picked_.token;
}

bool ReplyStream::take(int32_t token) {
  if (grammar_ && !is_stop(token)) grammar_->feed(codec_.token_bytes(token));
  ++completion_tokens_;
  generated_.tokens.push_back(token);
  if (req_.logprobs) pending_lp_.push_back({token, picked_.logprob, std::move(picked_.top)});
  const auto now = std::chrono::steady_clock::now();  // a verification pass is shared by its tokens
  if (completion_tokens_ == 1) first_token_at_ = now;
  counters_.add_token(std::chrono::duration<double>(now - last_).count());
  last_ = now;
  if (is_stop(token)) {
    stopped_ = true;
    generated_.ended_by_stop_token = true;
    return false;
  }
  // A token counts as reasoning when the reply is in its reasoning block before or after it.
  const bool reasoning_before = parser_.in_reasoning();
  const std::string text = stops_.push(detok_->push(token));
  auto count_reasoning = [&] {
    if (reasoning_before || parser_.in_reasoning()) ++reasoning_tokens_;
  };
  if (stops_.stopped()) {
    stopped_ = true;
    if (!release(text, false)) cancelled_ = true;
    count_reasoning();
    return false;
  }
  const bool released = release(text, false);
  count_reasoning();
  if (!released || (alive_ && !alive_())) {
    cancelled_ = true;
    return false;
  }
  if (grammar_ && grammar_->complete() && !grammar_->can_continue()) {  // nothing may follow
    stopped_ = true;
    return false;
  }
  return true;
}

void ReplyStream::finish(Outcome& out) {
  out.completion_tokens = completion_tokens_;
  out.first_token_at = first_token_at_;
  out.reasoning_tokens = reasoning_tokens_;
  if (cancelled_) {
    out.cancelled = true;
    return;
  }
  std::string tail;
  if (!stops_.stopped()) {
    tail = stops_.push(detok_->flush());
    tail += stops_.flush();
  }
  if (!release(tail, true)) {
    out.cancelled = cancelled_ = true;
    return;
  }
  // A reply whose calls were not all given to the client (parallel_tool_calls false) is not replayed.
  if (parser_.calls_seen() != int(generated_.calls.size())) generated_.ended_by_stop_token = false;
  out.generated = std::move(generated_);
  // Cut off by max_tokens is "length", even in the middle of a tool call.
  out.finish_reason = !stopped_ ? "length" : parser_.calls_seen() > 0 ? "tool_calls" : "stop";
}

}  // namespace sluice::chat
