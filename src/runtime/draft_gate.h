// The economics gate of speculative decoding: per request, it measures what
// drafting gains and costs and chooses how many tokens to draft at each step
// (0: decode plainly).
//
// Gain: the acceptance rate a, the chance that a drafted token is accepted
// when the ones before it were (accepted tokens over accepted tokens plus
// passes that ended on a rejection, recent passes weighing most), so a pass
// of k drafts emits E(k) = 1 + a + ... + a^k tokens. Cost: a pass of k drafts
// (drafting included) takes 1 + c*k plain steps, c measured from the times of
// passes against the time of one-token steps (on a model whose experts are
// streamed, a pass reads the union of its tokens' experts, so c is near 1 and
// drafting pays only when acceptance is very high). The gate drafts the k in
// 1..max that maximises E(k) / (1 + c*k) when that beats plain decoding by
// `margin`; otherwise it decodes plainly for `pause_tokens` steps (doubling
// after each failed probe, up to 32 times that), then probes with a 2-token
// draft weighing the old evidence less (the first draft is such a probe). Text whose drafts do not pay thus
// costs one short failed pass per pause, a fraction of a percent.
#pragma once
#include <cstdint>

namespace sluice {

struct DraftGateOptions {
  int64_t max_draft = 8;      // tokens verified per pass at most
  bool adaptive = true;       // false: always draft max_draft (tests and replays of a known acceptance)
  int64_t pause_tokens = 8;   // plain steps before the first re-probe after drafting turned off
  double margin = 0.02;       // drafting must promise this fraction more tokens per unit of time
  int64_t recalibrate = 128;  // passes after which one plain step is timed again
};

class DraftGate {
 public:
  explicit DraftGate(const DraftGateOptions& o);

  // Tokens to draft this step (at most `room`; 0: a plain step).
  int64_t next(int64_t room);
  // What the step cost: a plain one-token pass, or a verification pass of
  // `drafted` tokens of which `accepted` were kept (seconds include drafting).
  void plain(double seconds);
  void pass(int64_t drafted, int64_t accepted, double seconds);

  bool on() const { return paused_ == 0 && !probing_; }  // false: paused (plain decoding until the next probe)
  double acceptance() const { return acc_ / (acc_ + miss_); }
  double draft_cost() const { return c_; }  // c: a drafted token's cost in plain steps
  bool measured() const { return have_plain_ && c_samples_ > 0; }  // c measured (else a prior)
  int64_t off_steps() const { return off_steps_; }  // plain steps taken because drafting did not pay
  int64_t probes() const { return probes_; }
  // The draft length that pays best now (0: none), for `max` tokens at most.
  int64_t best_length(int64_t max) const;

 private:
  DraftGateOptions o_;
  double acc_ = 0.5, miss_ = 0.5;  // decayed evidence: accepted tokens, passes ended by a rejection
  double c_ = 0.25;            // prior until measured
  int64_t c_samples_ = 0;
  double t_plain_ = 0;
  bool have_plain_ = false;
  int64_t paused_ = 0, pause_len_;
  bool probing_ = true;  // the first draft is a probe too
  int64_t passes_since_plain_ = 0;
  int64_t off_steps_ = 0, probes_ = 0;
};

}  // namespace sluice
