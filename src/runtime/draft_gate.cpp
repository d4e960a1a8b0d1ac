#include "runtime/draft_gate.h"

#include <algorithm>

namespace sluice {

namespace {
constexpr double kDecay = 0.85;     // weight of the evidence of earlier passes, per pass
constexpr double kProbeKeep = 0.3;  // weight the evidence keeps when a probe follows a pause
constexpr double kCostWeight = 0.2; // weight of a new cost sample
// Timing noise only ever adds time (another process, a page fault): a sample
// moves an estimate by a bounded step, so one slow pass cannot switch drafting off.
constexpr double kMaxCostStep = 1;  // a cost sample is at most the estimate + this
constexpr double kMaxPlainStep = 2; // a plain step's time is at most this times the estimate
}  // namespace

DraftGate::DraftGate(const DraftGateOptions& o) : o_(o), pause_len_(std::max<int64_t>(1, o.pause_tokens)) {}

int64_t DraftGate::best_length(int64_t max) const {
  const double a = acceptance();
  double e = 1, ai = 1, best_value = 1 + o_.margin;
  int64_t best = 0;
  for (int64_t k = 1; k <= max; ++k) {
    ai *= a;
    e += ai;
    const double value = e / (1 + c_ * double(k));
    if (value > best_value) best = k, best_value = value;
  }
  return best;
}

int64_t DraftGate::next(int64_t room) {
  const int64_t max = std::min(o_.max_draft, room);
  if (max <= 0) return 0;
  if (!o_.adaptive) return max;
  if (!have_plain_ || passes_since_plain_ >= o_.recalibrate) return 0;  // time a plain step first
  if (paused_ > 0) {
    --paused_;
    ++off_steps_;
    return 0;
  }
  if (probing_) return std::min<int64_t>(2, max);
  const int64_t k = best_length(max);
  if (k > 0) return k;
  // Drafting does not pay: plain steps for a while, then a probe.
  paused_ = pause_len_ - 1;
  pause_len_ = std::min(pause_len_ * 2, std::max<int64_t>(1, o_.pause_tokens) * 32);
  probing_ = true;
  ++off_steps_;
  return 0;
}

void DraftGate::plain(double seconds) {
  t_plain_ = have_plain_ ? (1 - kCostWeight) * t_plain_ + kCostWeight * std::min(seconds, kMaxPlainStep * t_plain_)
                         : seconds;
  have_plain_ = true;
  passes_since_plain_ = 0;
}

void DraftGate::pass(int64_t drafted, int64_t accepted, double seconds) {
  if (drafted <= 0) return;
  if (probing_) {
    acc_ *= kProbeKeep, miss_ *= kProbeKeep;
    ++probes_;
  }
  acc_ = kDecay * acc_ + double(accepted);
  miss_ = kDecay * miss_ + (accepted < drafted ? 1.0 : 0.0);
  if (have_plain_ && t_plain_ > 0) {
    const double sample = std::clamp((seconds / t_plain_ - 1) / double(drafted), 0.0, c_ + kMaxCostStep);
    c_ = c_samples_ == 0 ? sample : (1 - kCostWeight) * c_ + kCostWeight * sample;
    ++c_samples_;
  }
  ++passes_since_plain_;
  if (probing_) {
    probing_ = false;
    if (best_length(o_.max_draft) > 0) pause_len_ = std::max<int64_t>(1, o_.pause_tokens);  // pays again
  }
}

}  // namespace sluice
