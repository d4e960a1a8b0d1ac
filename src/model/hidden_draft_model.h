// A draft model fed the target's own hidden rows (DSpark, EAGLE-3): what it
// builds from one sequence's rows (its caches) is a State, kept in step with
// that sequence by runtime/hidden_state_drafter.h, which hands it the rows
// each target pass captured (model/model.h HiddenCapture).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace sluice {

class HiddenDraftModel {
 public:
  class State {
   public:
    virtual ~State() = default;
    // Target positions whose rows it has taken.
    virtual int64_t positions() const = 0;
    virtual int64_t bytes() const = 0;
  };
  virtual ~HiddenDraftModel() = default;
  virtual std::unique_ptr<State> new_state() const = 0;
  // Decoder layers of the target whose outputs a row holds, side by side.
  virtual const std::vector<int64_t>& target_layers() const = 0;
  // Forgets everything that came from positions >= n (rows or tokens).
  virtual void cut(State& s, int64_t n) const = 0;
  // Takes the rows of positions [s.positions(), s.positions() + n) ([n,
  // width], row-major). `history`: the sequence's tokens through position
  // s.positions() + n, the last one chosen and not yet fed (a model that
  // pairs each row with the token after it reads them).
  virtual void extend(State& s, const float* rows, int64_t n, const std::vector<int32_t>& history) const = 0;
  // Up to k tokens to follow history.back(), the token at s.positions()
  // (s is as it was afterwards).
  virtual std::vector<int32_t> draft(State& s, const std::vector<int32_t>& history, int64_t k) const = 0;
};

}  // namespace sluice
