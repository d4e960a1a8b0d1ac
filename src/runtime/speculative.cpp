#include "runtime/speculative.h"

#include <algorithm>
#include <random>

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

namespace {
// Adaptive draft length: grows after full acceptance, shrinks to the accepted
// length + 1 after a miss, and pauses drafting while acceptance stays low.
struct DraftControl {
  const SpeculationOptions& o;
  int64_t len, paused = 0;
  double running = 1.0;  // running acceptance rate of recent passes
  explicit DraftControl(const SpeculationOptions& opts) : o(opts), len(opts.max_draft) {}
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
    if (accepted == proposed) len = std::min(o.max_draft, len + 2);
    else len = std::max<int64_t>(1, int64_t(accepted) + 1);
    running = 0.7 * running + 0.3 * double(accepted) / double(proposed);
    if (running < o.pause_below) {
      paused = o.pause_tokens;
      running = o.pause_below;  // one good pass after the pause resumes drafting
      len = 2;
    }
  }
};
// Drafts after `history`, then feeds `next` and the draft as one batch from a
// checkpoint; returns the logits of every position of the batch.
std::vector<float> draft_and_verify(Session& s, Drafter& drafter, DraftControl& control,
                                    const std::vector<int32_t>& history, int32_t next, int64_t room,
                                    SpeculationStats& st, std::vector<int32_t>& draft) {
  const int64_t want = control.next(room);
  draft = want > 0 ? drafter.propose(history, want) : std::vector<int32_t>{};
  std::vector<int32_t> batch{next};
  batch.insert(batch.end(), draft.begin(), draft.end());
  s.checkpoint();
  std::vector<float> logits = s.feed_all(batch);
  ++st.passes;
  st.proposed += int64_t(draft.size());
  return logits;
}

}  // namespace

std::vector<int32_t> generate_speculative(Session& s, const std::vector<int32_t>& prompt, int64_t max_new,
                                          bool ignore_eos, Drafter& drafter, const SpeculationOptions& opts,
                                          SpeculationStats* stats, const std::function<void(int32_t)>& on_token) {
  SpeculationStats local;
  SpeculationStats& st = stats ? *stats : local;
  std::vector<int32_t> out;
  if (max_new <= 0) return out;
  const auto& eos = s.model().info().eos_ids;
  const int64_t V = s.model().info().vocab;
  auto is_eos = [&](int32_t t) { return !ignore_eos && std::find(eos.begin(), eos.end(), t) != eos.end(); };
  std::vector<int32_t> history = prompt;
  const std::vector<float>& first = s.feed(prompt);
  int32_t next = argmax(first.data(), V);
  DraftControl control(opts);
  for (;;) {
    out.push_back(next);
    history.push_back(next);
    ++st.generated;
    if (on_token) on_token(next);
    if (int64_t(out.size()) >= max_new || is_eos(next)) break;
    // Never draft past the token budget.
    const int64_t room = max_new - int64_t(out.size());
    std::vector<int32_t> draft;
    std::vector<float> logits = draft_and_verify(s, drafter, control, history, next, room, st, draft);
    size_t a = 0;
    bool stop = false;
    while (a < draft.size() && argmax(logits.data() + a * size_t(V), V) == draft[a]) {
      out.push_back(draft[a]);
      history.push_back(draft[a]);
      ++st.generated;
      if (on_token) on_token(draft[a]);
      ++a;
      if (int64_t(out.size()) >= max_new || is_eos(draft[a - 1])) {
        stop = true;
        break;
      }
    }
    st.accepted += int64_t(a);
    s.rollback(int64_t(1 + a));  // keep `next` and the accepted drafts
    if (stop) break;
    next = argmax(logits.data() + a * size_t(V), V);  // the verifier's own token after the accepted prefix
    control.update(a, draft.size());
  }
  return out;
}

int32_t draw(const std::vector<double>& p, double u, int32_t excluded) {
  double total = 0;
  for (size_t i = 0; i < p.size(); ++i)
    if (int32_t(i) != excluded) total += p[i];
  double target = u * total, acc = 0;
  int32_t last = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    if (int32_t(i) == excluded || p[i] <= 0) continue;
    acc += p[i];
    last = int32_t(i);
    if (target < acc) return last;
  }
  return last;  // rounding at the top end
}

std::pair<bool, int32_t> verify_draft(const std::vector<double>& p, int32_t draft, double u_accept, double u_sample) {
  const double pd = draft >= 0 && size_t(draft) < p.size() ? p[size_t(draft)] : 0.0;
  if (u_accept < pd) return {true, draft};
  return {false, draw(p, u_sample, draft)};
}

std::vector<int32_t> generate_speculative_sampled(Session& s, const std::vector<int32_t>& prompt, int64_t max_new,
                                                  bool ignore_eos, Drafter& drafter, const SpeculationOptions& opts,
                                                  const Distribution& dist, uint64_t seed, SpeculationStats* stats,
                                                  const std::function<void(int32_t)>& on_token) {
  SpeculationStats local;
  SpeculationStats& st = stats ? *stats : local;
  std::vector<int32_t> out;
  if (max_new <= 0) return out;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  const auto& eos = s.model().info().eos_ids;
  const int64_t V = s.model().info().vocab;
  auto is_eos = [&](int32_t t) { return !ignore_eos && std::find(eos.begin(), eos.end(), t) != eos.end(); };
  std::vector<double> p;
  std::vector<int32_t> history = prompt;
  const std::vector<float>& first = s.feed(prompt);
  dist(first.data(), V, p);
  int32_t next = draw(p, U(rng));
  DraftControl control(opts);
  for (;;) {
    auto emit = [&](int32_t t) {
      out.push_back(t);
      history.push_back(t);
      ++st.generated;
      if (on_token) on_token(t);
      return int64_t(out.size()) >= max_new || is_eos(t);
    };
    if (emit(next)) break;
    const int64_t room = max_new - int64_t(out.size());
    std::vector<int32_t> draft;
    std::vector<float> logits = draft_and_verify(s, drafter, control, history, next, room, st, draft);
    size_t a = 0;
    bool stop = false;
    int32_t following = -1;  // the token after the accepted prefix
    for (; a < draft.size(); ++a) {
      dist(logits.data() + a * size_t(V), V, p);
      const double ua = U(rng), us = U(rng);
      auto [ok, tok] = verify_draft(p, draft[a], ua, us);
      if (!ok) {
        following = tok;
        break;
      }
      if (emit(draft[a])) {
        stop = true;
        ++a;
        break;
      }
    }
    st.accepted += int64_t(std::min(a, draft.size()));
    s.rollback(int64_t(1 + std::min(a, draft.size())));
    if (stop) break;
    if (following < 0) {  // every draft accepted: the bonus token from the last position
      dist(logits.data() + a * size_t(V), V, p);
      following = draw(p, U(rng));
    }
    next = following;
    control.update(std::min(a, draft.size()), draft.size());
  }
  return out;
}

}  // namespace sluice
