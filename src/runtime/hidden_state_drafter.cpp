#include "runtime/hidden_state_drafter.h"

#include <algorithm>

#include "runtime/session.h"

namespace sluice {

int64_t HiddenStateDrafter::positions(const Session& target) const {
  const HiddenCapture* cap = target.hidden_capture();
  for (const Followed& f : followed_)
    if (cap && f.capture == cap->id) return f.state->positions();
  return -1;
}

std::vector<int32_t> HiddenStateDrafter::propose_for(Session& target, const std::vector<int32_t>& history,
                                                     int64_t max) {
  HiddenCapture* cap = target.hidden_capture();
  if (!cap || cap->layers != model_->target_layers() || max <= 0) return {};
  const int64_t pos = target.position();
  if (int64_t(history.size()) != pos + 1) return {};  // not the session's tokens and the chosen one
  auto it = std::find_if(followed_.begin(), followed_.end(), [&](const Followed& f) { return f.capture == cap->id; });
  if (it == followed_.end()) {
    // A sequence not seen before: its rows from its first position on, or none.
    if (followed_.size() >= max_followed_)
      followed_.erase(std::min_element(followed_.begin(), followed_.end(),
                                        [](const Followed& a, const Followed& b) { return a.used < b.used; }));
    followed_.push_back({cap->id, model_->new_state(), cap->start == 0, 0});
    it = followed_.end() - 1;
  } else if (cap->changed_from >= 0) {
    // Rows the target rolled back (an edited conversation, a new turn) are
    // no longer the sequence's: drop what was built from them.
    model_->cut(*it->state, cap->changed_from);
  }
  Followed& f = *it;
  f.used = ++clock_;
  // Rows it never saw (capture set after the prompt, a restored state, a
  // sequence evicted and back): nothing to draft from.
  if (!f.built || cap->start != f.state->positions()) {
    f.built = false;
    cap->take(pos);  // not kept either: the capture would only grow
    return {};
  }
  const int64_t n = pos - cap->start;
  const std::vector<float> rows = cap->take(pos);
  model_->extend(*f.state, rows.data(), n, history);
  return model_->draft(*f.state, history, max);
}

}  // namespace sluice
