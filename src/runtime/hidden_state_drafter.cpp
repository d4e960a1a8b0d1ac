#include "runtime/hidden_state_drafter.h"

#include "runtime/session.h"

namespace sluice {

std::vector<int32_t> HiddenStateDrafter::propose_for(Session& target, const std::vector<int32_t>& history,
                                                     int64_t max) {
  HiddenCapture* cap = target.hidden_capture();
  if (!cap || cap->layers != model_->target_layers() || max <= 0) return {};
  const int64_t pos = target.position();
  if (int64_t(history.size()) != pos + 1) return {};  // not the session's tokens and the chosen one
  if (cap->id != capture_id_) {
    // Another sequence's capture (a new session): start over from its first
    // row, which must be its first position.
    model_->cut(0);
    capture_id_ = cap->id;
    built_ = cap->start == 0;
  } else if (cap->changed_from >= 0) {
    // Rows the target rolled back (an edited conversation, a new turn) are
    // no longer the sequence's: drop what was built from them.
    model_->cut(cap->changed_from);
  }
  // Rows it never saw (capture set after the prompt, a restored state, the
  // drafter serving several sessions in turn): nothing to draft from.
  if (!built_ || cap->start != model_->positions()) {
    built_ = false;
    cap->take(pos);  // not kept either: the capture would only grow
    return {};
  }
  const int64_t n = pos - cap->start;
  const std::vector<float> rows = cap->take(pos);
  model_->extend(rows.data(), n, history);
  return model_->draft(history, max);
}

}  // namespace sluice
