// A draft model fed the target's own hidden rows (DSpark, EAGLE-3): what it
// builds from them is kept in step with the target's sequence by
// runtime/hidden_state_drafter.h, which hands it the rows each target pass
// captured (model/model.h HiddenCapture).
#pragma once
#include <cstdint>
#include <vector>

namespace sluice {

class HiddenDraftModel {
 public:
  virtual ~HiddenDraftModel() = default;
  // Decoder layers of the target whose outputs a row holds, side by side.
  virtual const std::vector<int64_t>& target_layers() const = 0;
  // Target positions whose rows it has taken.
  virtual int64_t positions() const = 0;
  // Forgets everything that came from positions >= n (rows or tokens).
  virtual void cut(int64_t n) = 0;
  // Takes the rows of positions [positions(), positions() + n) ([n, width],
  // row-major). `history`: the sequence's tokens through position
  // positions() + n, the last one chosen and not yet fed (a model that pairs
  // each row with the token after it reads them).
  virtual void extend(const float* rows, int64_t n, const std::vector<int32_t>& history) = 0;
  // Up to k tokens to follow history.back(), the token at positions().
  virtual std::vector<int32_t> draft(const std::vector<int32_t>& history, int64_t k) = 0;
  // Decoder layers' state bytes it holds (its caches).
  virtual int64_t state_bytes() const = 0;
};

}  // namespace sluice
