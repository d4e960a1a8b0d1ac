// Draft-based speculative decoding that never changes the output: a drafter
// guesses the next tokens, the model verifies all of them in one batched
// forward pass (each routed expert read once for the batch), the longest
// prefix that matches what greedy decoding would have produced is kept, the
// state rolls back exactly to it, and the verifier's own next token is added.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/session.h"

namespace sluice {

// Proposes up to `max` tokens to follow `history`.
class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::vector<int32_t> propose(const std::vector<int32_t>& history, int64_t max) = 0;
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

struct SpeculationOptions {
  int64_t max_draft = 8;   // tokens verified per pass at most
  bool adaptive = true;    // shrink drafts while acceptance is low, grow them while high,
                           // and pause drafting while it stays low
  double pause_below = 0.25;  // running acceptance under which drafting pauses
  int64_t pause_tokens = 8;   // plain decoding steps before drafting is tried again
};

struct SpeculationStats {
  int64_t passes = 0;           // verification forward passes
  int64_t proposed = 0;         // draft tokens proposed
  int64_t accepted = 0;         // draft tokens accepted
  int64_t generated = 0;        // tokens emitted
  double acceptance() const { return proposed ? double(accepted) / double(proposed) : 0.0; }
};

// Greedy generation with speculation; the tokens equal generate_greedy's.
std::vector<int32_t> generate_speculative(Session& s, const std::vector<int32_t>& prompt, int64_t max_new,
                                          bool ignore_eos, Drafter& drafter, const SpeculationOptions& opts,
                                          SpeculationStats* stats, const std::function<void(int32_t)>& on_token = {});

}  // namespace sluice
