// The economics gate of speculative decoding: per request, it measures what
// drafting gains and costs and chooses how many tokens to draft at each step
// (0: decode plainly).
//
// Gain: the acceptance rate a, the chance that a drafted token is accepted
// when the ones before it were (accepted tokens over accepted tokens plus
// drafts that ended on a rejection, recent drafts weighing most), so a pass
// of k drafts emits E(k) = 1 + a + ... + a^k tokens. Cost: what a pass of k
// drafts (drafting included) takes in plain steps, measured for each k from
// the times of passes against the time of one-token steps: it is not linear
// in k (on a model whose experts are streamed a pass reads the union of its
// tokens' experts, on a small one fixed costs are shared), so each k has its
// own estimate, and a k not yet measured is taken at the per-token cost of
// the nearest measured one (before any, a prior of 1 + k/4). The gate drafts
// the k in 1..max that maximises E(k) / cost(k) when that beats plain
// decoding by `margin`; otherwise drafting pauses, in one of two ways:
//
// - A lookup drafter (n-gram, suffix: asking costs nothing) is watched: it
//   keeps proposing while paused, and its drafts are checked against the
//   tokens plain decoding picks (watched()), which is the same evidence a
//   verification pass would give, without the pass. Drafting resumes as soon
//   as the evidence says it pays; no probes are spent.
// - Any other drafter (a draft model: asking runs it) is probed: after
//   `pause_tokens` plain steps a 2-token draft is tried, weighing the old
//   evidence less (the first draft is such a probe too). Pauses double after
//   each probe that does not pay (up to 32 times `pause_tokens`), and each is
//   at least long enough that the last probe's measured loss (its time in
//   plain steps less the tokens it emitted) is at most `probe_loss` of it, so
//   text whose drafts do not pay stays within that share of plain decoding's
//   time, whatever a probe costs (a draft model catching up included).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {

struct DraftGateOptions {
  int64_t max_draft = 8;      // tokens verified per pass at most
  bool adaptive = true;       // false: always draft max_draft (tests and replays of a known acceptance)
  int64_t pause_tokens = 8;   // plain steps before the first re-probe after drafting turned off
  double margin = 0.02;       // drafting must promise this fraction more tokens per unit of time
  int64_t recalibrate = 128;  // passes after which one plain step is timed again
  double probe_loss = 0.02;   // a failed probe's loss at most this share of the pause before the next one
};

class DraftGate {
 public:
  // lookup: the drafter costs nothing to ask, so a pause watches it instead of probing.
  explicit DraftGate(const DraftGateOptions& o, bool lookup = false);

  // Tokens to draft this step (at most `room`; 0: a plain step).
  int64_t next(int64_t room);
  // While a lookup drafter is paused: how many tokens to ask it for, to be
  // checked against the coming plain tokens (0: none).
  int64_t watch(int64_t room) const;
  // What the step cost: a plain one-token pass, or a verification pass of
  // `drafted` tokens of which `accepted` were kept (seconds include drafting).
  void plain(double seconds);
  void pass(int64_t drafted, int64_t accepted, double seconds);
  // A watched draft of `drafted` tokens whose first `accepted` were the plain tokens.
  void watched(int64_t drafted, int64_t accepted);

  bool on() const { return mode_ == Mode::drafting; }  // false: paused (watching, or plain until the next probe)
  bool paused() const { return mode_ == Mode::paused || mode_ == Mode::watching; }
  double acceptance() const { return acc_ / (acc_ + miss_); }
  // A pass of k drafts' cost in plain steps, drafting included (measured, or from the nearest measured k).
  double pass_cost(int64_t k) const;
  bool measured(int64_t k) const { return k >= 1 && k < int64_t(cost_n_.size()) && cost_n_[size_t(k)] > 0; }
  // A drafted token's cost in plain steps at the draft length last drafted (the longest before any).
  double draft_cost() const;
  bool measured() const { return have_plain_ && measured(last_k_); }
  int64_t off_steps() const { return off_steps_; }  // plain steps taken because drafting did not pay
  int64_t probes() const { return probes_; }
  int64_t watched_drafts() const { return watched_; }
  int64_t pause_length() const { return last_pause_; }  // the last pause before a probe, in plain steps (0: none)
  // The draft length that pays best now (0: none), for `max` tokens at most.
  int64_t best_length(int64_t max) const;

 private:
  enum class Mode { drafting, probing, paused, watching };
  void stop_drafting();
  void add_evidence(int64_t drafted, int64_t accepted);

  DraftGateOptions o_;
  bool lookup_;
  Mode mode_ = Mode::probing;      // the first draft is a probe
  double acc_ = 0.5, miss_ = 0.5;  // decayed evidence: accepted tokens, drafts ended by a rejection
  std::vector<double> cost_;       // [k]: a pass of k drafts in plain steps (where cost_n_[k] > 0)
  std::vector<int64_t> cost_n_;    // [k]: samples of cost_[k]
  int64_t last_k_ = 0;
  double t_plain_ = 0;
  bool have_plain_ = false;
  int64_t paused_ = 0, pause_len_, last_pause_ = 0;
  int64_t watched_since_pause_ = 0;
  int64_t passes_since_plain_ = 0;
  int64_t off_steps_ = 0, probes_ = 0, watched_ = 0;
};

}  // namespace sluice
