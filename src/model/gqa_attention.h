// Grouped-query attention with the options Qwen3-MoE and gpt-oss need:
// biases, per-head q/k RMSNorm, NeoX RoPE (YaRN-scaled), sliding windows and
// attention sinks. Caches post-RoPE keys and values.
#pragma once
#include "kernels/qmatrix.h"
#include "model/blocks.h"
#include "model/rope.h"

namespace sluice {

struct GqaSpec {
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 0.0f;       // softmax scale
  int64_t window = 0;       // 0: full causal attention; else the last `window` positions incl. self
  float norm_eps = 1e-6f;   // q/k norm epsilon
  Rope rope;
};

struct GqaWeights {
  QMatrix q, k, v, o;
  const float *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr, *o_bias = nullptr;
  const float *q_norm = nullptr, *k_norm = nullptr;  // [head_dim], Qwen3
  const float* sinks = nullptr;                      // [n_heads], gpt-oss
};

class GqaAttention : public AttentionBlock {
 public:
  GqaAttention(GqaSpec spec, GqaWeights w) : s_(std::move(spec)), w_(w) {}
  std::unique_ptr<LayerState> new_state() const override;
  void forward(const float* x, int64_t T, int64_t pos, LayerState& state, float* out) const override;

 private:
  GqaSpec s_;
  GqaWeights w_;
};

}  // namespace sluice
