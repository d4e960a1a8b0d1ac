// The two kinds of block a decoder layer is made of. Attention blocks keep
// per-sequence state; feed-forward blocks are stateless.
#pragma once
#include <cstdint>
#include <memory>

#include "model/model.h"

namespace sluice {

class AttentionBlock {
 public:
  virtual ~AttentionBlock() = default;
  virtual std::unique_ptr<LayerState> new_state() const = 0;
  // x: [T, hidden] normalised input at positions pos..pos+T-1; out: [T, hidden].
  virtual void forward(const float* x, int64_t T, int64_t pos, LayerState& state, float* out) const = 0;
};

class FfnBlock {
 public:
  virtual ~FfnBlock() = default;
  // x: [T, hidden]; out: [T, hidden] (overwritten).
  virtual void forward(const float* x, int64_t T, float* out) const = 0;
  // A guess at this block's input (used to prefetch routed experts); default: nothing.
  virtual void prefetch_hint(const float* /*x*/, int64_t /*T*/) const {}
};

}  // namespace sluice
