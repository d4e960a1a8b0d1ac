#include "runtime/draft_gate.h"

#include <algorithm>
#include <cmath>

namespace sluice {

namespace {
constexpr double kDecay = 0.85;      // weight of the evidence of earlier drafts, per draft
constexpr double kProbeKeep = 0.3;   // weight the evidence keeps when a probe follows a pause
constexpr double kCostWeight = 0.2;  // weight of a new cost sample
constexpr double kPriorCost = 0.25;  // a drafted token's cost in plain steps before any pass is measured
constexpr int64_t kMinWatched = 2;   // watched drafts after a pause before drafting may resume
// Timing noise only ever adds time (another process, a page fault): a sample
// moves an estimate by a bounded step, so one slow pass cannot switch drafting off.
constexpr double kMaxCostStep = 1;   // a pass of k drafts' sample is at most its estimate + k times this
constexpr double kMaxPlainStep = 2;  // a plain step's time is at most this times the estimate
}  // namespace

DraftGate::DraftGate(const DraftGateOptions& o, bool lookup)
    : o_(o),
      lookup_(lookup),
      cost_(size_t(std::max<int64_t>(1, o.max_draft)) + 1, 0.0),
      cost_n_(cost_.size(), 0),
      pause_len_(std::max<int64_t>(1, o.pause_tokens)) {}

double DraftGate::pass_cost(int64_t k) const {
  if (measured(k)) return cost_[size_t(k)];
  // The per-token cost of the nearest measured length (the shorter on a tie).
  int64_t near = 0;
  for (int64_t j = 1; j < int64_t(cost_.size()); ++j)
    if (measured(j) && (near == 0 || std::abs(j - k) < std::abs(near - k))) near = j;
  const double per_token = near ? (cost_[size_t(near)] - 1) / double(near) : kPriorCost;
  return 1 + per_token * double(k);
}

double DraftGate::draft_cost() const {
  const int64_t k = last_k_ > 0 ? last_k_ : std::max<int64_t>(1, o_.max_draft);
  return (pass_cost(k) - 1) / double(k);
}

int64_t DraftGate::best_length(int64_t max) const {
  const double a = acceptance();
  double e = 1, ai = 1, best_value = 1 + o_.margin;
  int64_t best = 0;
  for (int64_t k = 1; k <= max; ++k) {
    ai *= a;
    e += ai;
    const double value = e / pass_cost(k);
    if (value > best_value) best = k, best_value = value;
  }
  return best;
}

void DraftGate::stop_drafting() {
  if (lookup_) {
    mode_ = Mode::watching;
    watched_since_pause_ = 0;
  } else {
    mode_ = Mode::paused;
    paused_ = last_pause_ = pause_len_;
  }
}

int64_t DraftGate::next(int64_t room) {
  const int64_t max = std::min(o_.max_draft, room);
  if (max <= 0) return 0;
  if (!o_.adaptive) return max;
  if (!have_plain_ || passes_since_plain_ >= o_.recalibrate) return 0;  // time a plain step first
  switch (mode_) {
    case Mode::watching:
      ++off_steps_;
      return 0;
    case Mode::paused:
      if (paused_ > 0) {
        --paused_;
        ++off_steps_;
        return 0;
      }
      mode_ = Mode::probing;
      [[fallthrough]];
    case Mode::probing:
      return std::min<int64_t>(2, max);
    case Mode::drafting:
      break;
  }
  const int64_t k = best_length(max);
  if (k > 0) return k;
  stop_drafting();  // drafting does not pay: watch, or plain steps for a while and then a probe
  if (mode_ == Mode::paused) --paused_;
  ++off_steps_;
  return 0;
}

int64_t DraftGate::watch(int64_t room) const {
  return o_.adaptive && mode_ == Mode::watching ? std::min(o_.max_draft, room) : 0;
}

void DraftGate::plain(double seconds) {
  t_plain_ = have_plain_ ? (1 - kCostWeight) * t_plain_ + kCostWeight * std::min(seconds, kMaxPlainStep * t_plain_)
                         : seconds;
  have_plain_ = true;
  passes_since_plain_ = 0;
}

void DraftGate::add_evidence(int64_t drafted, int64_t accepted) {
  acc_ = kDecay * acc_ + double(accepted);
  miss_ = kDecay * miss_ + (accepted < drafted ? 1.0 : 0.0);
}

void DraftGate::pass(int64_t drafted, int64_t accepted, double seconds) {
  if (drafted <= 0) return;
  const bool probe = mode_ == Mode::probing;
  if (probe) {
    acc_ *= kProbeKeep, miss_ *= kProbeKeep;
    ++probes_;
  }
  add_evidence(drafted, accepted);
  if (size_t(drafted) >= cost_.size()) cost_.resize(size_t(drafted) + 1, 0.0), cost_n_.resize(cost_.size(), 0);
  last_k_ = drafted;
  double steps = 0;  // the pass in plain steps
  if (have_plain_ && t_plain_ > 0) {
    steps = seconds / t_plain_;
    const size_t k = size_t(drafted);
    const double sample = std::clamp(steps, 1.0, pass_cost(drafted) + kMaxCostStep * double(drafted));
    cost_[k] = cost_n_[k] == 0 ? sample : (1 - kCostWeight) * cost_[k] + kCostWeight * sample;
    ++cost_n_[k];
  }
  ++passes_since_plain_;
  if (!probe || !o_.adaptive) return;
  if (best_length(o_.max_draft) > 0) {  // pays again
    mode_ = Mode::drafting;
    pause_len_ = std::max<int64_t>(1, o_.pause_tokens);
    return;
  }
  // The probe lost (its time less the tokens it gave, in plain steps): the pause
  // before the next one is long enough that this stays within probe_loss of it.
  const double loss = steps - double(accepted + 1);
  const int64_t by_loss = o_.probe_loss > 0 ? int64_t(std::ceil(loss / o_.probe_loss)) : 0;
  stop_drafting();
  if (mode_ == Mode::paused) {
    paused_ = last_pause_ = std::max(pause_len_, by_loss);
    pause_len_ = std::min(pause_len_ * 2, std::max<int64_t>(1, o_.pause_tokens) * 32);
  }
}

void DraftGate::watched(int64_t drafted, int64_t accepted) {
  if (drafted <= 0 || mode_ != Mode::watching) return;
  add_evidence(drafted, accepted);
  ++watched_;
  if (++watched_since_pause_ >= kMinWatched && best_length(o_.max_draft) > 0) mode_ = Mode::drafting;
}

}  // namespace sluice
