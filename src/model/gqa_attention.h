// Grouped-query attention with the options Qwen3-MoE and gpt-oss need:
// biases, per-head q/k RMSNorm, NeoX RoPE (YaRN-scaled), sliding windows and
// attention sinks. Caches post-RoPE keys and values.
#pragma once
#include "compute/backend.h"
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

// Heads, head size, softmax scale and NeoX RoPE from a transformers config
// (num_attention_heads, num_key_value_heads, head_dim, rope_*), checked: errors
// name the file and field. Without num_key_value_heads: an error when
// `kv_heads_required`, else one KV head per head.
GqaSpec gqa_spec_from_config(const Config& cfg, int64_t hidden, bool kv_heads_required);

struct GqaWeights {
  Matrix q, k, v, o;
  Vector q_bias, k_bias, v_bias, o_bias;
  Vector q_norm, k_norm;  // [head_dim], Qwen3
  Vector sinks;           // [n_heads], gpt-oss
};

class GqaAttention : public AttentionBlock {
 public:
  GqaAttention(Backend& be, GqaSpec spec, GqaWeights w) : be_(be), s_(std::move(spec)), w_(w) {
    require_op(be, Op::GqaAttend, "grouped-query attention");
  }
  std::unique_ptr<LayerState> new_state() const override;
  uint64_t state_bytes_per_token() const override { return uint64_t(2 * s_.n_kv_heads * s_.head_dim * 4); }
  uint64_t state_bytes_fixed() const override { return 0; }
  void forward(Tensor x, std::span<const SequenceRows> seqs, Tensor out) const override;
  int64_t activation_floats_per_token() const override {  // q, k, v and o
    return 2 * s_.n_heads * s_.head_dim + 2 * s_.n_kv_heads * s_.head_dim;
  }

 private:
  Backend& be_;
  GqaSpec s_;
  GqaWeights w_;
};

}  // namespace sluice
