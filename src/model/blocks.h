// The two kinds of block a decoder layer is made of. Attention blocks keep
// per-sequence state; feed-forward blocks are stateless. Both compute through
// the backend (compute/backend.h) on activations in backend memory.
//
// A pass may carry several sequences: x holds the rows of all of them, and
// each SequenceRows says which rows are one sequence's tokens, at which
// positions, with which state. Products run over all rows at once; attention
// cores run per sequence.
#pragma once
#include <cstdint>
#include <memory>
#include <span>

#include "compute/tensor.h"
#include "model/model.h"

namespace sluice {

struct SequenceRows {
  LayerState* state = nullptr;
  int64_t pos = 0;   // position of the first row
  int64_t row0 = 0;  // first row in x / out
  int64_t rows = 0;
};

class AttentionBlock {
 public:
  virtual ~AttentionBlock() = default;
  virtual std::unique_ptr<LayerState> new_state() const = 0;
  // What the state costs: bytes per position fed (caches) and bytes regardless (recurrent state).
  virtual uint64_t state_bytes_per_token() const = 0;
  virtual uint64_t state_bytes_fixed() const = 0;
  // x: [rows, hidden] normalised input; out: [rows, hidden].
  virtual void forward(Tensor x, std::span<const SequenceRows> seqs, Tensor out) const = 0;
  // Scratch activations forward() allocates per row of x, in floats (for sizing prefill chunks).
  virtual int64_t activation_floats_per_token() const = 0;
};

class FfnBlock {
 public:
  virtual ~FfnBlock() = default;
  // x: [T, hidden]; out: [T, hidden] (overwritten).
  virtual void forward(Tensor x, Tensor out) const = 0;
  // Scratch activations forward() allocates per row of x, in floats, at most;
  // routed_width: rows of the layer's routed expert gate (gate and up) matrix, 0 if none.
  virtual int64_t activation_floats_per_token(int64_t routed_width) const = 0;
  // A guess at this block's input (used to prefetch routed experts), looked at in batches of
  // at most `batch_rows` rows (0: all at once); default: nothing.
  virtual void prefetch_hint(Tensor /*x*/, int64_t /*batch_rows*/ = 0) const {}
  // forward() over every row of a long prefill's span (model/decoder.h forward_span), holding
  // per-call scratch for at most `batch_rows` rows at a time. Rows are independent and the
  // products give a row the same bits whatever the batch, so this is forward()'s result.
  // `out` may be `x` itself (a span writes the output over the input): every block reads a
  // row of x before it writes that row of out. Default: forward() over consecutive batches of
  // rows (a batch's rows are read whole before any is written).
  virtual void forward_span(Tensor x, Tensor out, int64_t batch_rows) const;
  // What forward_span holds for every row of the span at once, in floats per row (beyond
  // the batch's scratch, which activation_floats_per_token bounds). Default: nothing.
  virtual int64_t span_floats_per_token() const { return 0; }
};

}  // namespace sluice
