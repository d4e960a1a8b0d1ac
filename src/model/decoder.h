// The decoder shared by every family. Architecture files only choose the blocks.
// Plain residual stream (DeepSeek, Qwen, gpt-oss, Kimi Linear):
//   h += Attn(RMSNorm(h));  h += FFN(RMSNorm(h));  logits = lm_head(RMSNorm(h))
// Block Attention Residuals (Kimi K3): the inputs of attention, FFN and the
// final norm are softmax-weighted mixes of earlier block outputs and the
// current block's partial sum, per token (see forward_attn_res).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "compute/backend.h"
#include "compute/expert_source.h"
#include "format/checkpoint.h"
#include "model/blocks.h"
#include "model/model.h"
#include "model/weights.h"

namespace sluice {

// Called around each decoder layer's work (the engine streams the spine layer
// by layer through these).
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual void before_layer(int64_t layer) = 0;
  virtual void after_layer(int64_t layer) = 0;
};

class Decoder : public Model {
 public:
  struct Layer {
    Vector attn_norm, ffn_norm;
    std::unique_ptr<AttentionBlock> attn;
    std::unique_ptr<FfnBlock> ffn;
    // Block AttnRes mixing weights (RMSNorm weight and [1, hidden] projection) before attention and FFN.
    Vector attn_res_norm, attn_res_proj, ffn_res_norm, ffn_res_proj;
  };
  struct AttnRes {
    int64_t block_size = 0;  // layers per block; 0: plain residual stream
    float eps = 1e-5f;
    Vector out_norm, out_proj;
  };

  // Takes ownership of the checkpoint so the mapped weights outlive the blocks;
  // computes on `backend`, which must outlive the decoder.
  Decoder(ModelInfo info, std::unique_ptr<Checkpoint> ckpt, std::string prefix, Backend& backend);

  Backend& backend() const { return be_; }
  WeightLoader& weights() { return *weights_; }
  const WeightLoader& weights() const { return *weights_; }
  // Routed experts as mapped from the checkpoint, and the slot MoE blocks read
  // them through (the table itself unless another source is installed).
  ExpertTable& experts() { return table_; }
  const ExpertTable& experts() const { return table_; }
  std::shared_ptr<ExpertSourceSlot> expert_slot() const { return slot_; }
  void set_expert_source(std::unique_ptr<ExpertSource> source);
  // Hands over the installed source (null when MoE blocks read the table), e.g. to wrap it.
  std::unique_ptr<ExpertSource> take_expert_source();
  ExpertSource& expert_source() const { return *slot_->source; }
  const Checkpoint& checkpoint() const { return *ckpt_; }
  // Hooks run around every layer (null: none); not owned.
  void set_layer_hooks(LayerHooks* hooks) { hooks_ = hooks; }
  // Called after each decoder layer of every pass with the layer's index (progress of long prefills).
  void set_layer_observer(std::function<void(int64_t layer)> f) { on_layer_ = std::move(f); }
  int64_t layers() const { return int64_t(layers_.size()); }
  // Per-sequence state of all layers: bytes per position fed, and bytes regardless.
  uint64_t state_bytes_per_token() const;
  uint64_t state_bytes_fixed() const;
  // Activations and scratch one token of a pass needs at most (the residual
  // stream, Block AttnRes snapshots, the largest layer's attention or FFN
  // scratch): the memory plan's reserve divided by this is the longest chunk.
  uint64_t activation_bytes_per_token() const;
  // Prefetch the next MoE layer's experts from a guess of its router input.
  void set_prefetch(bool on) { prefetch_ = on; }
  void set_embedding(Matrix embed, Matrix lm_head, Vector final_norm, float eps);
  // The token embedding and the output head (drafters that borrow them: DSpark).
  const Matrix& embedding() const { return embed_; }
  const Matrix& head() const { return lm_head_; }
  // Tied embeddings: the head is the embedding table, read whole by every token.
  bool head_is_embedding() const { return lm_head_.q.data == embed_.q.data; }
  void add_layer(Layer layer) { layers_.push_back(std::move(layer)); }
  void set_attn_res(AttnRes a) {
    if (a.block_size > 0) require_op(be_, Op::AttnResMix, "Block AttnRes");
    attn_res_ = a;
  }

  const ModelInfo& info() const override { return info_; }
  ModelInfo& mutable_info() { return info_; }
  ExpertStats expert_stats() const override;
  std::unique_ptr<State> new_state() const override;
  void forward(State& state, const int32_t* tokens, int64_t T, float* logits, bool all_logits,
               ForwardTrace* trace) const override;
  void forward_batch(std::span<const SequenceFeed> feeds) const override;
  // Layer by layer over all T tokens (model/decoder_span.cpp).
  void forward_span(State& state, const int32_t* tokens, int64_t T, int64_t chunk, float* logits) const override;
  uint64_t span_bytes_per_token() const override;

 private:
  ModelInfo info_;
  Backend& be_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<WeightLoader> weights_;
  Matrix embed_, lm_head_;
  Vector final_norm_;
  float eps_ = 1e-6f;
  std::vector<Layer> layers_;
  AttnRes attn_res_;
  ExpertTable table_;
  std::shared_ptr<ExpertSourceSlot> slot_;
  std::unique_ptr<ExpertSource> installed_source_;
  bool prefetch_ = false;
  LayerHooks* hooks_ = nullptr;
  std::function<void(int64_t)> on_layer_;

  // Hints the next MoE layer's experts from h (scratch: h's shape, or empty to allocate it).
  void prefetch_next(size_t layer, Tensor h, Tensor scratch = {}, int64_t batch_rows = 0) const;
  void trace_layer(ForwardTrace* trace, size_t layer, Tensor h) const;

  // One sequence of a pass: its state and its rows of the activations.
  struct PassSequence {
    State* state;
    int64_t row0, rows;
  };
  std::vector<SequenceRows> layer_rows(std::span<const PassSequence> seqs, size_t layer) const;
  // After each layer: names the first non-finite value at once, or (Backend::defers_finite_checks)
  // has the backend record it; check_watched_finite reads the record once as the pass ends.
  void check_layer_finite(std::span<const PassSequence> seqs, size_t layer, Tensor h) const;
  void check_watched_finite(std::span<const PassSequence> seqs) const;
  static void check_stop(std::span<const PassSequence> seqs);  // throws Cancelled when a state's stop says so
  // Hidden-state captures (model.h HiddenCapture): room for a pass's rows, then each layer's rows.
  void prepare_captures(std::span<const PassSequence> seqs) const;
  void capture_layer(std::span<const PassSequence> seqs, size_t layer, Tensor h) const;
  void forward_residual(std::span<const PassSequence> seqs, Tensor h, ForwardTrace* trace) const;
  void forward_attn_res(std::span<const PassSequence> seqs, Tensor h, ForwardTrace* trace) const;
  void check_feed(const State& state, const int32_t* tokens, int64_t T) const;
  // forward_span's layers: attention in chunks of c rows from position pos0, feed-forward over all rows.
  void span_residual(State& state, int64_t pos0, int64_t c, Tensor h, Tensor xn) const;
  void span_attn_res(State& state, int64_t pos0, int64_t c, Tensor h, Tensor xn) const;
  void forward_pass(std::span<const SequenceFeed> feeds, ForwardTrace* trace) const;
};

}  // namespace sluice
