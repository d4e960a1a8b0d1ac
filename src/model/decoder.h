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
#include "model/blocks.h"
#include "model/model.h"
#include "model/weights.h"

namespace sluice {

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
  void set_embedding(QMatrix embed, QMatrix lm_head, const float* final_norm, float eps);
  void add_layer(Layer layer) { layers_.push_back(std::move(layer)); }
  void set_attn_res(AttnRes a) { attn_res_ = a; }

  const ModelInfo& info() const override { return info_; }
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

  void forward_residual(State& state, float* h, int64_t T, ForwardTrace* trace) const;
  void forward_attn_res(State& state, float* h, int64_t T, ForwardTrace* trace) const;
};

// Looks up token rows of the embedding table; errors name the bad id.
void embed_tokens(const QMatrix& embed, const int32_t* tokens, int64_t T, float* out);

}  // namespace sluice
