// The decoder shared by every family with a plain residual stream:
//   h += Attn(RMSNorm(h));  h += FFN(RMSNorm(h));  logits = lm_head(RMSNorm(h))
// Architecture files only choose the blocks.
#pragma once
#include <memory>
#include <vector>

#include "format/checkpoint.h"
#include "model/blocks.h"
#include "model/model.h"
#include "model/weights.h"

namespace sluice {

class ResidualDecoder : public Model {
 public:
  struct Layer {
    const float* attn_norm = nullptr;
    const float* ffn_norm = nullptr;
    std::unique_ptr<AttentionBlock> attn;
    std::unique_ptr<FfnBlock> ffn;
  };

  // Takes ownership of the checkpoint so the mapped weights outlive the blocks.
  ResidualDecoder(ModelInfo info, std::unique_ptr<Checkpoint> ckpt, std::string prefix);

  WeightLoader& weights() { return *weights_; }
  void set_embedding(QMatrix embed, QMatrix lm_head, const float* final_norm, float eps);
  void add_layer(Layer layer) { layers_.push_back(std::move(layer)); }

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
};

// Looks up token rows of the embedding table; errors name the bad id.
void embed_tokens(const QMatrix& embed, const int32_t* tokens, int64_t T, float* out);

}  // namespace sluice
