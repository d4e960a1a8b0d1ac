// The model interface every architecture implements: a forward pass over
// per-sequence state. Models are opened by the engine (engine/engine.h).
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compute/expert_source.h"

namespace sluice {

struct ModelInfo {
  std::string arch;  // model_type as dispatched
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t n_layers = 0;
  int64_t max_positions = 0;  // 0: unbounded
  std::vector<int32_t> eos_ids;
};

// One tensor of a layer's state copied to host memory, for saving a session
// and restoring it later (runtime/state_file.h).
struct SavedTensor {
  int64_t rows = 0, cols = 0;
  // One row per position fed (a cache): its first p rows are the state after
  // p positions. Otherwise the tensor is the state after all of them (recurrent).
  bool per_position = false;
  std::vector<float> values;  // rows * cols, row-major
};

// Per-layer cached state: KV cache, latent cache, or recurrent state.
// Speculative decoding feeds a batch of guesses and then keeps only a prefix:
// checkpoint() marks the rollback point, rollback(keep) returns the state to
// "checkpoint + the first `keep` tokens fed since", bit for bit, and removes
// the mark. Checkpoints nest: rollback() always goes to the innermost one
// (the server's mark at the end of a prompt outlives speculation's per-pass marks).
class LayerState {
 public:
  virtual ~LayerState() = default;
  virtual int64_t bytes() const = 0;
  // record=false: the mark will only be returned to exactly (keep 0), so a
  // state that would otherwise record every token fed after it need not.
  virtual void checkpoint(bool record) = 0;
  virtual void rollback(int64_t keep) = 0;
  virtual void commit() = 0;  // removes the innermost mark, keeping everything fed since
  // Whether keeping a prefix after a mark needs per-token records (recurrent
  // state) rather than dropping rows (caches).
  virtual bool needs_records() const { return false; }
  // The state after every token fed, as host tensors (open checkpoints and
  // their records are not part of it).
  virtual std::vector<SavedTensor> save() const = 0;
  // Becomes the state save() gave, cut to its first `positions` positions
  // (only per-position tensors can be cut: recurrent tensors must hold
  // exactly `positions`, which the caller checks), with no checkpoint open.
  // Throws sluice::Error when the tensors do not have this layer's shapes,
  // leaving the state as it was.
  virtual void restore(const std::vector<SavedTensor>& saved, int64_t positions) = 0;
};

// The residual stream's rows after chosen decoder layers, copied during every
// pass that feeds the state (prefill chunks and verification batches alike):
// what drafters trained on the target's hidden states (DSpark, EAGLE-3) read,
// without a second pass. Each position's row is the chosen layers' outputs
// side by side, in `layers` order (the same values ForwardTrace::hidden holds
// for them). Only positions [start, State::pos) not yet taken by the reader
// are held, so the capture stays small however long the sequence; a rollback
// drops the rows past the kept position like the layers' caches do, and
// records in `changed_from` when it drops rows the reader already took.
struct HiddenCapture {
  uint64_t id = 0;              // tells one sequence's capture from another's (a reader serving several)
  std::vector<int64_t> layers;  // decoder layer indices
  int64_t hidden = 0;           // floats per layer per position
  int64_t start = 0;            // first position held
  std::vector<float> rows;      // (State::pos - start) rows of width()
  // The lowest position rolled back to below `start` since the reader's last
  // take(): what it took from there on is no longer the sequence's (none: -1).
  int64_t changed_from = -1;

  int64_t width() const { return int64_t(layers.size()) * hidden; }
  // Where this capture's part of layer `layer` goes in a row (-1: not captured).
  int64_t column_of(int64_t layer) const {
    for (size_t j = 0; j < layers.size(); ++j)
      if (layers[j] == layer) return int64_t(j) * hidden;
    return -1;
  }
  // Hands over the rows held (positions [start, pos)) and holds none after them.
  std::vector<float> take(int64_t pos) {
    std::vector<float> out = std::move(rows);
    rows.clear();
    start = pos;
    changed_from = -1;
    return out;
  }
  // The state went back to `pos` positions.
  void cut(int64_t pos) {
    if (pos < start) {
      changed_from = changed_from < 0 ? pos : std::min(changed_from, pos);
      start = pos;
    }
    rows.resize(size_t((pos - start) * width()));
  }
};

// A sequence being decoded: position plus every layer's state.
struct State {
  int64_t pos = 0;
  struct Mark {
    int64_t pos;
    bool record;
  };
  std::vector<Mark> checkpoints;  // each open checkpoint, innermost last
  std::vector<std::unique_ptr<LayerState>> layers;
  // Polled before each decoder layer of a pass that feeds this state (null:
  // never). When it returns true the pass throws sluice::Cancelled: the
  // layers may then hold part of the pass, so whoever sets it rolls the state
  // back to a mark taken before the pass (Session::feed does). Reading it
  // changes no computed value.
  const std::function<bool()>* stop = nullptr;
  // Rows the decoder copies for a drafter during every pass (null: none).
  std::unique_ptr<HiddenCapture> capture;
  int64_t bytes() const {
    int64_t b = 0;
    for (const auto& l : layers) b += l ? l->bytes() : 0;
    return b;
  }
  void checkpoint(bool record = true) {
    checkpoints.push_back({pos, record});
    for (auto& l : layers)
      if (l) l->checkpoint(record);
  }
  // Whether rollback(keep > 0) to the innermost mark is possible.
  bool can_keep() const {
    if (checkpoints.empty()) return false;
    if (checkpoints.back().record) return true;
    for (const auto& l : layers)
      if (l && l->needs_records()) return false;
    return true;
  }
  void rollback(int64_t keep);  // keep <= tokens fed since the innermost checkpoint()
  void commit();                // removes the innermost checkpoint, keeping the state
};

// Optional capture of intermediate values for verification.
struct ForwardTrace {
  std::vector<std::vector<float>> hidden;  // [layer] -> T*hidden, output of each decoder layer
  std::vector<float> final_hidden;         // T*hidden, output of the final norm
};

// One sequence's part of a forward pass over several sequences.
struct SequenceFeed {
  State* state = nullptr;
  const int32_t* tokens = nullptr;
  int64_t n = 0;              // tokens fed at positions state->pos .. state->pos+n-1
  float* logits = nullptr;    // [n, vocab] when all_logits, else [vocab] (last token); may be null
  bool all_logits = false;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  virtual std::unique_ptr<State> new_state() const = 0;
  // Feeds T tokens at positions state.pos .. state.pos+T-1 and advances state.pos.
  // logits: [T, vocab] when all_logits, else [vocab] for the last token only; may be null.
  virtual void forward(State& state, const int32_t* tokens, int64_t T, float* logits, bool all_logits,
                       ForwardTrace* trace = nullptr) const = 0;
  // Several sequences (distinct states) in one pass: products over all their
  // tokens, each layer's weights and the union of their routed experts read
  // once. Each sequence's logits are bit for bit what forward() gives it alone
  // (the kernels' products give every row the same bits whatever the batch).
  // The decoder checks every feed (vocabulary, context, distinct states)
  // before any state changes. Default: one forward() per sequence.
  virtual void forward_batch(std::span<const SequenceFeed> feeds) const {
    for (const SequenceFeed& f : feeds) forward(*f.state, f.tokens, f.n, f.logits, f.all_logits);
  }
  // Feeds T tokens of one sequence, as forward() with all_logits false, in passes of
  // at most `chunk` tokens' activations: bit for bit what forward() over consecutive
  // chunks gives. A model may run it layer by layer (every layer over all T tokens
  // before the next, attention chunk by chunk), reading each layer's weights and
  // routed experts once for the T tokens rather than once per chunk. Default: the
  // forward() calls over consecutive chunks.
  virtual void forward_span(State& state, const int32_t* tokens, int64_t T, int64_t chunk, float* logits) const;
  // What forward_span holds for every one of its tokens at once, in bytes (its chunk's
  // activations aside); 0: it holds none (it runs chunk by chunk).
  virtual uint64_t span_bytes_per_token() const { return 0; }
  // The longest prompt piece a session feeds through forward_span at once (0: none, chunk
  // by chunk): set by a model that knows its memory (engine/engine.h).
  virtual int64_t prefill_span() const { return 0; }
  // Counters of the routed-expert source (reads, cache hits, prefetch).
  virtual ExpertStats expert_stats() const { return {}; }
};

}  // namespace sluice
