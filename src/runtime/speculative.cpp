#include "runtime/speculative.h"

#include <algorithm>

namespace sluice {

std::vector<int32_t> NgramDrafter::propose(const std::vector<int32_t>& h, int64_t max) {
  const int64_t N = int64_t(h.size());
  for (int64_t n = std::min(max_n_, N - 1); n >= min_n_; --n) {
    // Most recent earlier occurrence of the last n tokens.
    for (int64_t start = N - n - 1; start >= 0; --start) {
      if (!std::equal(h.begin() + start, h.begin() + start + n, h.end() - n)) continue;
      std::vector<int32_t> out;
      for (int64_t i = start + n; i < N && int64_t(out.size()) < max; ++i) out.push_back(h[size_t(i)]);
      if (!out.empty()) return out;
    }
  }
  return {};
}

std::vector<int32_t> ReplayDrafter::propose(const std::vector<int32_t>& h, int64_t max) {
  std::vector<int32_t> out;
  for (size_t i = h.size(); i < text_.size() && int64_t(out.size()) < max; ++i) {
    int32_t t = text_[i];
    if (wrong_every_ > 0 && ++count_ % wrong_every_ == 0) t = int32_t((t + 1) % vocab_);
    out.push_back(t);
  }
  return out;
}

namespace {
// Adaptive draft length. Every drafted position costs its share of a batched
// pass (its routed experts above all), so drafts start short and double while
// every token is accepted; a miss shrinks them to the accepted length + 1.
// While acceptance stays low drafting pauses, for twice as long each time a
// pause is followed by another failure, so text the drafter cannot predict
// costs close to nothing.
struct DraftControl {
  const SpeculationOptions& o;
  int64_t len, paused = 0, pause_len;
  double running = 0.5;  // running acceptance rate of recent passes (two misses in a row pause drafting)
  explicit DraftControl(const SpeculationOptions& opts)
      : o(opts), len(std::min<int64_t>(opts.max_draft, 2)), pause_len(opts.pause_tokens) {}
  // Draft length for this step (0: decode plainly).
  int64_t next(int64_t room) {
    if (paused > 0) {
      --paused;
      return 0;
    }
    return std::min(len, room);
  }
  void update(size_t accepted, size_t proposed) {
    if (!o.adaptive || proposed == 0) return;
    const double rate = double(accepted) / double(proposed);
    if (accepted == proposed) len = std::min(o.max_draft, len * 2);
    else len = std::max<int64_t>(1, int64_t(accepted) + 1);
    running = 0.7 * running + 0.3 * rate;
    if (rate >= 0.5) pause_len = o.pause_tokens;  // drafting pays again: short pauses
    if (running < o.pause_below) {
      paused = pause_len;
      pause_len = std::min<int64_t>(pause_len * 2, o.pause_tokens * 32);
      running = o.pause_below;  // one good pass after the pause resumes drafting
      len = std::min<int64_t>(o.max_draft, 2);
    }
  }
};
}  // namespace

int64_t decode(Session& s, std::vector<float> logits, std::vector<int32_t> history, int64_t max_new,
               const TokenPicker& pick, const TokenSink& take, Drafter* drafter, const SpeculationOptions& opts,
               SpeculationStats* stats) {
  SpeculationStats local;
  SpeculationStats& st = stats ? *stats : local;
  if (max_new <= 0) return 0;
  const size_t V = size_t(s.model().info().vocab);
  int64_t n = 0;
  // Picks and hands over the token at one position; false: decoding ends here.
  auto emit = [&](float* row, int32_t& token) {
    token = pick(row);
    history.push_back(token);
    ++n;
    ++st.generated;
    return take(token) && n < max_new;
  };
  int32_t next;  // chosen and taken, not yet fed
  if (!emit(logits.data(), next)) return n;
  DraftControl control(opts);
  for (;;) {
    // Never draft past the token budget.
    const int64_t want = drafter ? control.next(max_new - n) : 0;
    std::vector<int32_t> draft = want > 0 ? drafter->propose(history, want) : std::vector<int32_t>{};
    if (draft.empty()) {
      logits = s.feed({next});
      ++st.plain;
      if (!emit(logits.data(), next)) return n;
      continue;
    }
    // `next` and the draft in one pass; position i's logits choose the token after draft[i-1].
    std::vector<int32_t> batch{next};
    batch.insert(batch.end(), draft.begin(), draft.end());
    s.checkpoint();
    logits = s.feed_all(batch);
    ++st.passes;
    st.proposed += int64_t(draft.size());
    size_t i = 0;
    bool more = true;
    int32_t chosen = -1;
    for (;; ++i) {
      more = emit(logits.data() + i * V, chosen);
      if (!more || i == draft.size() || chosen != draft[i]) break;
    }
    const bool matched = i < draft.size() && chosen == draft[i];  // only when stopping on a draft token
    st.accepted += int64_t(i + (matched ? 1 : 0));
    // Keep `next` and the drafts taken before position i (the token chosen there is not fed yet).
    s.rollback(int64_t(1 + i));
    if (!more) return n;
    control.update(i, draft.size());
    next = chosen;
  }
}

std::vector<int32_t> generate(Session& s, const std::vector<int32_t>& prompt, int64_t max_new, bool ignore_eos,
                              const TokenPicker& pick, Drafter* drafter, const SpeculationOptions& opts,
                              SpeculationStats* stats, const std::function<void(int32_t)>& on_token) {
  std::vector<int32_t> out;
  if (max_new <= 0) return out;
  const auto& eos = s.model().info().eos_ids;
  std::vector<float> logits = s.feed(prompt);
  auto take = [&](int32_t t) {
    out.push_back(t);
    if (on_token) on_token(t);
    return ignore_eos || std::find(eos.begin(), eos.end(), t) == eos.end();
  };
  decode(s, std::move(logits), s.tokens(), max_new, pick, take, drafter, opts, stats);
  return out;
}

std::vector<int32_t> generate_speculative(Session& s, const std::vector<int32_t>& prompt, int64_t max_new,
                                          bool ignore_eos, Drafter& drafter, const SpeculationOptions& opts,
                                          SpeculationStats* stats, const std::function<void(int32_t)>& on_token) {
  const int64_t V = s.model().info().vocab;
  auto greedy = [V](float* logits) { return argmax(logits, V); };
  return generate(s, prompt, max_new, ignore_eos, greedy, &drafter, opts, stats, on_token);
}

}  // namespace sluice
