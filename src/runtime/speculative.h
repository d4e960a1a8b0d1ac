// Decoding, plain or speculative. Speculation never changes the output: a
// drafter guesses the next tokens, the model verifies all of them in one
// batched forward pass (each routed expert read once for the batch), the
// longest prefix that matches what plain decoding would have chosen is kept,
// the state rolls back exactly to it, and the verifier's own next token is added.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/draft_gate.h"
#include "runtime/session.h"

namespace sluice {

// What a drafter's index holds (suffix drafts; zero for the others).
struct DraftIndexSize {
  int64_t tokens = 0, bytes = 0, documents = 0, max_tokens = 0;
};

// Proposes up to `max` tokens to follow `history`.
class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::vector<int32_t> propose(const std::vector<int32_t>& history, int64_t max) = 0;
  // The same, told that only history[0, settled) is final: the rest was
  // tokenised again from text (drafts across tokenizers,
  // runtime/retokenizing_drafter.h) and may change at the next call. A
  // drafter with state keeps only the final part; by default this is propose().
  virtual std::vector<int32_t> propose_after(const std::vector<int32_t>& history, size_t /*settled*/, int64_t max) {
    return propose(history, max);
  }
  // Decoder layers of the target whose outputs this drafter reads (empty:
  // none). The target's session then captures them during its passes
  // (Session::capture_hidden, set up by capture_for_drafter before the prompt).
  virtual std::vector<int64_t> target_layers() const { return {}; }
  // What decode() asks: `history` is target.tokens() and the token chosen
  // after them (not yet fed). A drafter reading the target's hidden states
  // takes them from `target`'s capture; by default this is propose().
  virtual std::vector<int32_t> propose_for(Session& /*target*/, const std::vector<int32_t>& history, int64_t max) {
    return propose(history, max);
  }
  virtual DraftIndexSize index_size() const { return {}; }
  // Whether asking costs time even when nothing comes back (a draft model runs
  // before its draft is known to be usable): decode() then tells the gate of
  // an empty draft as of a pass with nothing accepted, so a drafter that keeps
  // coming back empty is paused like one whose drafts are rejected. Lookups
  // (n-gram, suffix) that find nothing cost nothing and stay plain steps; as
  // asking them is free, while the gate pauses drafting they are still asked,
  // and their drafts are checked against the tokens plain decoding picks
  // (runtime/draft_gate.h: the gate watches them instead of probing).
  virtual bool costs_when_empty() const { return false; }
  // Drafting is paused (plain steps for a while, then a probe): the next
  // proposal may start from recent text only, instead of catching up on every
  // token decoded meanwhile (a draft model restarts from the last tokens).
  virtual void pause() {}
};

// Looks up the longest recent suffix (n down to min_n tokens) earlier in the
// prompt and generated text and proposes what followed it last time.
class NgramDrafter : public Drafter {
 public:
  NgramDrafter(int64_t max_n = 4, int64_t min_n = 2) : max_n_(max_n), min_n_(min_n) {}
  std::vector<int32_t> propose(const std::vector<int32_t>& history, int64_t max) override;

 private:
  int64_t max_n_, min_n_;
};

// Proposes a known continuation `text` (prompt + tokens), with every
// `wrong_every`-th proposed token replaced by another id (0: never): drafts of
// a chosen quality, for tests and for measuring what speculation gains or costs
// at a known acceptance on models no real drafter can predict (random weights).
class ReplayDrafter : public Drafter {
 public:
  ReplayDrafter(std::vector<int32_t> text, int64_t wrong_every, int64_t vocab)
      : text_(std::move(text)), wrong_every_(wrong_every), vocab_(vocab) {}
  // The same with each proposed token right with probability `acceptance`
  // (seeded: the same calls give the same drafts), so a draft token is
  // accepted after an accepted one at that rate, the gate's model.
  static ReplayDrafter with_acceptance(std::vector<int32_t> text, double acceptance, uint64_t seed, int64_t vocab);
  std::vector<int32_t> propose(const std::vector<int32_t>& history, int64_t max) override;

 private:
  std::vector<int32_t> text_;
  int64_t wrong_every_, vocab_, count_ = 0;
  double acceptance_ = -1;  // >= 0: right with this probability (wrong_every_ unused)
  uint64_t seed_ = 0;
};

// Draft length and the economics gate (runtime/draft_gate.h): how many
// tokens to draft at each step from the measured acceptance and cost.
struct SpeculationOptions : DraftGateOptions {
  // The seconds a forward pass of `tokens` tokens (drafting included) is taken
  // to cost, instead of its measured time: tests of the gate's decisions that
  // must not depend on how busy the machine is (empty: measured).
  std::function<double(int64_t tokens)> pass_cost;
};

struct SpeculationStats {
  int64_t passes = 0;           // verification forward passes (a draft and the token before it)
  int64_t plain = 0;            // one-token forward passes (no draft this step)
  int64_t proposed = 0;         // draft tokens proposed
  int64_t accepted = 0;         // draft tokens accepted
  int64_t generated = 0;        // tokens emitted
  // The gate (runtime/draft_gate.h).
  int64_t off_steps = 0;        // plain steps taken because drafting did not pay
  int64_t probes = 0;           // short drafts tried after a pause
  int64_t watched = 0;          // lookup drafts checked against plain tokens while paused
  int64_t watched_accepted = 0; // their tokens that plain decoding picked
  double gate_seconds = 0;      // asking for watched drafts and the gate's bookkeeping
  double plain_seconds = 0;     // in one-token passes (drafting included when a draft came back empty)
  double pass_seconds = 0;      // in verification passes, drafting included
  bool gate_on = false;         // at the end: drafting (else paused until the next probe)
  bool gate_used = true;        // false: SpeculationOptions::adaptive was off
  double gate_acceptance = 0;   // at the end: estimated chance a draft token is accepted after an accepted one
  double gate_draft_cost = 0;   // at the end: a drafted token's cost in plain steps (measured, else the prior)
  // At the end: [k] a verification pass of k drafts' cost in plain steps, drafting
  // included (k = 1..max; 0 where k was never drafted).
  std::vector<double> gate_pass_cost;
  int64_t gate_pause = 0;       // at the end: the last pause before a probe, in plain steps (drafters that are probed)
  DraftIndexSize index;         // the drafter's index at the end
  double acceptance() const { return proposed ? double(accepted) / double(proposed) : 0.0; }
  int64_t forward_passes() const { return passes + plain; }  // after the prompt's
  // The gate's own time (watching included) as a share of decoding's.
  double gate_share() const {
    const double all = plain_seconds + pass_seconds + gate_seconds;
    return all > 0 ? gate_seconds / all : 0.0;
  }
};

// One line for --stats: tokens, passes, acceptance, the gate's state and
// measurements, and the drafter's index.
std::string describe_speculation(const SpeculationStats& st);

// Chooses the token for one position from its logits (it may adjust them in
// place, e.g. a logit bias). decode() calls it exactly once per emitted token,
// in order, with or without speculation, so a stateful picker such as a seeded
// sampler makes the same choices both ways.
using TokenPicker = std::function<int32_t(float* logits)>;
// Takes each chosen token, in order; returning false stops decoding after it.
using TokenSink = std::function<bool(int32_t token)>;

// Decodes up to max_new tokens after a prompt already fed to `s`: `logits` are
// the prompt's last position's, `history` the tokens so far (the drafter's
// context). Without a drafter, one token per forward pass. With one, the
// chosen token and a draft are fed as one batch; the token picked at each
// position is compared with the draft and the first difference ends the pass
// (it becomes the next chosen token), the state rolls back to it, and the
// batch's last position gives a bonus token when every draft matched. Because
// a position's logits do not depend on how tokens were batched, the output is
// the plain output token for token, for greedy and sampled picking alike. For
// sampling this is the standard rejection rule for a deterministic draft d:
// d is accepted with probability p(d), and on rejection the token is drawn
// from p with d removed. The last emitted token is never fed, as in plain
// decoding. Returns the number of tokens emitted.
int64_t decode(Session& s, std::vector<float> logits, std::vector<int32_t> history, int64_t max_new,
               const TokenPicker& pick, const TokenSink& take, Drafter* drafter, const SpeculationOptions& opts,
               SpeculationStats* stats);

// Makes `s` capture the hidden rows `drafter` reads (none: nothing to do);
// call it before feeding the prompt.
void capture_for_drafter(Session& s, const Drafter* drafter);

// Feeds `prompt` (after whatever `s` already holds), then decodes with `pick`
// (speculating when `drafter` is set, on the whole text so far), stopping after an
// end-of-sequence id unless ignore_eos. on_token sees every token.
std::vector<int32_t> generate(Session& s, const std::vector<int32_t>& prompt, int64_t max_new, bool ignore_eos,
                              const TokenPicker& pick, Drafter* drafter, const SpeculationOptions& opts,
                              SpeculationStats* stats, const std::function<void(int32_t)>& on_token = {});

// Greedy generation with speculation; the tokens equal generate_greedy's.
std::vector<int32_t> generate_speculative(Session& s, const std::vector<int32_t>& prompt, int64_t max_new,
                                          bool ignore_eos, Drafter& drafter, const SpeculationOptions& opts,
                                          SpeculationStats* stats, const std::function<void(int32_t)>& on_token = {});

}  // namespace sluice
