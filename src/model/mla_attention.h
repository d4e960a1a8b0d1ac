// Multi-head latent attention (DeepSeek-V3 / Kimi) in the absorbed form: the
// cache holds only the normalised latent c_kv and the shared rope key per
// token; queries are mapped into the latent space through W_UK and the
// attention result back out through W_UV (the backend's mla_attend).
// Optional NoPE (Kimi Linear / K3) and sigmoid output gate (K3).
#pragma once
#include <string>

#include "compute/backend.h"
#include "format/tensor_names.h"
#include "model/blocks.h"
#include "model/rope.h"

namespace sluice {

struct MlaSpec {
  int64_t n_heads = 0, q_lora = 0, kv_lora = 0, nope = 0, rope_dim = 0, v_dim = 0;
  float scale = 0.0f;          // softmax scale (YaRN mscale^2 included)
  float low_rank_eps = 1e-6f;  // q_a_layernorm / kv_a_layernorm epsilon
  bool use_rope = true;        // false: the pe dimensions are used unrotated
  Rope rope;
};

struct MlaWeights {
  Matrix q_a, q_b;  // with q_lora
  Matrix q;         // without q_lora
  Matrix kv_a, kv_b, o;
  Matrix gate;      // output gate (empty: none)
  Vector q_a_norm, kv_a_norm;
};

class WeightLoader;
// Layer `layer`'s MLA tensors as the family's table names them, shape-checked against
// `spec`; `output_gate` also loads the gate (AttnGate: Kimi K3's g_proj).
MlaWeights load_mla_weights(const WeightLoader& W, const TensorNames& names, int64_t layer, const MlaSpec& spec,
                            int64_t hidden, bool output_gate);

class MlaAttention : public AttentionBlock {
 public:
  MlaAttention(Backend& be, MlaSpec spec, MlaWeights w) : be_(be), s_(std::move(spec)), w_(w) {
    require_op(be, Op::MlaAttend, "MLA attention");
  }
  std::unique_ptr<LayerState> new_state() const override;
  uint64_t state_bytes_per_token() const override { return uint64_t((s_.kv_lora + s_.rope_dim) * 4); }
  uint64_t state_bytes_fixed() const override { return 0; }
  void forward(Tensor x, std::span<const SequenceRows> seqs, Tensor out) const override;
  int64_t activation_floats_per_token() const override {  // q, its low-rank input, the latent, o and the gate
    return s_.n_heads * (s_.nope + s_.rope_dim) + s_.q_lora + s_.kv_lora + s_.rope_dim + 2 * s_.n_heads * s_.v_dim;
  }

 private:
  Backend& be_;
  MlaSpec s_;
  MlaWeights w_;
};

}  // namespace sluice
