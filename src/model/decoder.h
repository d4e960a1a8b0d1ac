// The decoder shared by every family. Architecture files only choose the blocks.
// Plain residual stream (DeepSeek, Qwen, gpt-oss, Kimi Linear):
//   h += Attn(RMSNorm(h));  h += FFN(RMSNorm(h));  logits = lm_head(RMSNorm(h))
// Block Attention Residuals (Kimi K3): the inputs of attention, FFN and the
// final norm are softmax-weighted mixes of earlier block outputs and the
// current block's partial sum, per token (see forward_attn_res).
#pragma once
#include <memory>
#include <vector>

#include "format/checkpoint.h"
#include "compute/expert_source.h"
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
    const float* attn_norm = nullptr;
    const float* ffn_norm = nullptr;
    std::unique_ptr<AttentionBlock> attn;
    std::unique_ptr<FfnBlock> ffn;
    // Block AttnRes mixing weights (RMSNorm weight and [1, hidden] projection) before attention and FFN.
    const float *attn_res_norm = nullptr, *attn_res_proj = nullptr;
    const float *ffn_res_norm = nullptr, *ffn_res_proj = nullptr;
  };
  struct AttnRes {
    int64_t block_size = 0;  // layers per block; 0: plain residual stream
    float eps = 1e-5f;
    const float *out_norm = nullptr, *out_proj = nullptr;
  };

  // Takes ownership of the checkpoint so the mapped weights outlive the blocks.
  Decoder(ModelInfo info, std::unique_ptr<Checkpoint> ckpt, std::string prefix);

  WeightLoader& weights() { return *weights_; }
  const WeightLoader& weights() const { return *weights_; }
  // Routed experts as mapped from the checkpoint, and the slot MoE blocks read
  // them through (the table itself unless another source is installed).
  ExpertTable& experts() { return table_; }
  const ExpertTable& experts() const { return table_; }
  std::shared_ptr<ExpertSourceSlot> expert_slot() const { return slot_; }
  void set_expert_source(std::unique_ptr<ExpertSource> source);
  ExpertSource& expert_source() const { return *slot_->source; }
  const Checkpoint& checkpoint() const { return *ckpt_; }
  // Hooks run around every layer (null: none); not owned.
  void set_layer_hooks(LayerHooks* hooks) { hooks_ = hooks; }
  int64_t layers() const { return int64_t(layers_.size()); }
  // Prefetch the next MoE layer's experts from a guess of its router input.
  void set_prefetch(bool on) { prefetch_ = on; }
  void set_embedding(QMatrix embed, QMatrix lm_head, const float* final_norm, float eps);
  void add_layer(Layer layer) { layers_.push_back(std::move(layer)); }
  void set_attn_res(AttnRes a) { attn_res_ = a; }

  const ModelInfo& info() const override { return info_; }
  ModelInfo& mutable_info() { return info_; }
  ExpertStats expert_stats() const override { return slot_->source->stats(); }
  std::unique_ptr<State> new_state() const override;
  void forward(State& state, const int32_t* tokens, int64_t T, float* logits, bool all_logits,
               ForwardTrace* trace) const override;

 private:
  ModelInfo info_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<WeightLoader> weights_;
  QMatrix embed_, lm_head_;
  const float* final_norm_ = nullptr;
  float eps_ = 1e-6f;
  std::vector<Layer> layers_;
  AttnRes attn_res_;
  ExpertTable table_;
  std::shared_ptr<ExpertSourceSlot> slot_;
  std::unique_ptr<ExpertSource> installed_source_;
  bool prefetch_ = false;
  LayerHooks* hooks_ = nullptr;

  void prefetch_next(size_t layer, const float* h, int64_t T) const;

  void forward_residual(State& state, float* h, int64_t T, ForwardTrace* trace) const;
  void forward_attn_res(State& state, float* h, int64_t T, ForwardTrace* trace) const;
};

// Looks up token rows of the embedding table; errors name the bad id.
void embed_tokens(const QMatrix& embed, const int32_t* tokens, int64_t T, float* out);

}  // namespace sluice
