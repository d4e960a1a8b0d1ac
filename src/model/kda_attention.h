// Kimi Delta Attention (Kimi Linear, Kimi K3): short causal convolutions on
// q/k/v, L2-normalised q/k, a channel-wise decay gate, beta, and the gated
// delta rule on a per-head [D x D] state:
//   S <- diag(exp g) S;  u = v - S^T k;  S <- S + beta k u^T;  o = S^T q
// followed by a per-head RMSNorm and a sigmoid output gate.
// The recurrence is evaluated token by token for prefill and decode alike.
#pragma once
#include <vector>

#include "kernels/qmatrix.h"
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
  QMatrix q, k, v, f_a, f_b, b, o;
  QMatrix g_a, g_b;  // low-rank output gate (Kimi Linear)
  QMatrix g;         // full-rank output gate (K3); rows == 0 when absent
  const float *q_conv = nullptr, *k_conv = nullptr, *v_conv = nullptr;  // [channels, kernel]
  const float* dt_bias = nullptr;                                       // [channels]
  std::vector<float> a_log;                                             // per head
  const float* o_norm = nullptr;                                        // [head_dim]
};

class KdaAttention : public AttentionBlock {
 public:
  KdaAttention(KdaSpec spec, KdaWeights w) : s_(spec), w_(std::move(w)) {}
  std::unique_ptr<LayerState> new_state() const override;
  void forward(const float* x, int64_t T, int64_t pos, LayerState& state, float* out) const override;

 private:
  KdaSpec s_;
  KdaWeights w_;
};

}  // namespace sluice
