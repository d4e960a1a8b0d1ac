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
  int64_t draft_len = opts.max_draft, paused = 0;
  double running = 1.0;  // running acceptance rate of recent passes
  for (;;) {
    out.push_back(next);
    history.push_back(next);
    ++st.generated;
    if (on_token) on_token(next);
    if (int64_t(out.size()) >= max_new || is_eos(next)) break;
    // Never draft past the token budget.
    const int64_t room = max_new - int64_t(out.size());
    std::vector<int32_t> draft;
    if (paused > 0) --paused;
    else draft = drafter.propose(history, std::min(draft_len, room));
    std::vector<int32_t> batch{next};
    batch.insert(batch.end(), draft.begin(), draft.end());
    s.checkpoint();
    std::vector<float> logits = s.feed_all(batch);
    ++st.passes;
    st.proposed += int64_t(draft.size());
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
    if (opts.adaptive && !draft.empty()) {
      if (a == draft.size()) draft_len = std::min(opts.max_draft, draft_len + 2);
      else draft_len = std::max<int64_t>(1, int64_t(a) + 1);
      running = 0.7 * running + 0.3 * double(a) / double(draft.size());
      if (running < opts.pause_below) {
        paused = opts.pause_tokens;
        running = opts.pause_below;  // one good pass after the pause resumes drafting
        draft_len = 2;
      }
    }
  }
  return out;
}

}  // namespace sluice
