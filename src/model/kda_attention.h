// Kimi Delta Attention (Kimi Linear, Kimi K3): short causal convolutions on
// q/k/v, L2-normalised q/k, a channel-wise decay gate, beta, and the gated
// delta rule on a per-head [D x D] state:
//   S <- diag(exp g) S;  u = v - S^T k;  S <- S + beta k u^T;  o = S^T q
// followed by a per-head RMSNorm and a sigmoid output gate.
// The recurrence is evaluated token by token for prefill and decode alike.
#pragma once
#include <vector>

#include "compute/backend.h"
#include "model/blocks.h"

namespace sluice {

struct KdaSpec {
  int64_t n_heads = 0, head_dim = 0, conv_kernel = 4;
  enum Gate { Softplus, LowerBound } gate = Softplus;  // Kimi Linear: -exp(A) softplus(z); K3: lb * sigmoid(exp(A) z)
  float lower_bound = -5.0f;
  float norm_eps = 1e-5f;  // output RMSNorm
  float l2_eps = 1e-6f;
};

struct KdaWeights {
  Matrix q, k, v, f_a, f_b, b, o;
  Matrix g_a, g_b;  // low-rank output gate (Kimi Linear)
  Matrix g;         // full-rank output gate (K3); empty when absent
  Vector q_conv, k_conv, v_conv;  // [channels, kernel]
  Vector dt_bias;                 // [channels]
  Vector a_log;                   // per head
  Vector o_norm;                  // [head_dim]
};

class KdaAttention : public AttentionBlock {
 public:
  KdaAttention(Backend& be, KdaSpec spec, KdaWeights w) : be_(be), s_(spec), w_(std::move(w)) {
    for (Op op : {Op::ShortConv, Op::KdaGate, Op::DeltaRule}) require_op(be, op, "Kimi Delta Attention");
  }
  std::unique_ptr<LayerState> new_state() const override;
  uint64_t state_bytes_per_token() const override { return 0; }
  uint64_t state_bytes_fixed() const override {  // convolution history of q, k, v and the [D x D] state per head
    const int64_t C = s_.n_heads * s_.head_dim;
    return uint64_t((3 * (s_.conv_kernel - 1) * C + s_.n_heads * s_.head_dim * s_.head_dim) * 4);
  }
  void forward(Tensor x, std::span<const SequenceRows> seqs, Tensor out) const override;
  int64_t activation_floats_per_token() const override {  // q, k, v, the gates' inputs, decay, beta, gate, o
    const int64_t C = s_.n_heads * s_.head_dim;
    return 6 * C + w_.f_a.rows() + w_.g_a.rows() + s_.n_heads;
  }

 private:
  Backend& be_;
  KdaSpec s_;
  KdaWeights w_;
};

}  // namespace sluice
