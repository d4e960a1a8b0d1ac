#include "model/mla_attention.h"

#include <vector>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/kv_cache.h"
#include "model/weights.h"

namespace sluice {

MlaWeights load_mla_weights(const WeightLoader& W, const std::string& A, const MlaSpec& s, int64_t D, bool output_gate) {
  MlaWeights w;
  const int64_t qh = s.nope + s.rope_dim;
  if (s.q_lora > 0) {
    w.q_a = W.linear(A + "q_a_proj", s.q_lora, D);
    w.q_a_norm = W.vec(A + "q_a_layernorm.weight", s.q_lora);
    w.q_b = W.linear(A + "q_b_proj", s.n_heads * qh, s.q_lora);
  } else {
    w.q = W.linear(A + "q_proj", s.n_heads * qh, D);
  }
  w.kv_a = W.linear(A + "kv_a_proj_with_mqa", s.kv_lora + s.rope_dim, D);
  w.kv_a_norm = W.vec(A + "kv_a_layernorm.weight", s.kv_lora);
  w.kv_b = W.linear(A + "kv_b_proj", s.n_heads * (s.nope + s.v_dim), s.kv_lora);
  w.o = W.linear(A + "o_proj", D, s.n_heads * s.v_dim);
  if (output_gate) w.gate = W.linear(A + "g_proj", s.n_heads * s.v_dim, D);
  return w;
}

std::unique_ptr<LayerState> MlaAttention::new_state() const {
  return std::make_unique<RowCache>(std::vector<int64_t>{s_.kv_lora + s_.rope_dim});
}

void MlaAttention::forward(const float* x, int64_t T, int64_t pos, LayerState& state, float* out) const {
  auto& cache = static_cast<RowCache&>(state);
  const int64_t H = s_.n_heads, C = s_.kv_lora, R = s_.rope_dim, N = s_.nope, V = s_.v_dim;
  const int64_t D = w_.kv_a.cols, qh = N + R, qw = H * qh;
  std::vector<float> q(size_t(T * qw));
  if (s_.q_lora > 0) {
    std::vector<float> qa(size_t(T * s_.q_lora));
    matmul(w_.q_a, x, T, D, qa.data(), s_.q_lora);
    for (int64_t t = 0; t < T; ++t)
      ops::rmsnorm(qa.data() + t * s_.q_lora, w_.q_a_norm, s_.low_rank_eps, s_.q_lora, qa.data() + t * s_.q_lora);
    matmul(w_.q_b, qa.data(), T, s_.q_lora, q.data(), qw);
  } else {
    matmul(w_.q, x, T, D, q.data(), qw);
  }
  std::vector<float> kva(size_t(T * (C + R)));
  matmul(w_.kv_a, x, T, D, kva.data(), C + R);
  cache.resize(pos + T);
  for (int64_t t = 0; t < T; ++t) {
    float* row = cache.row(0, pos + t);
    const float* src = kva.data() + t * (C + R);
    ops::rmsnorm(src, w_.kv_a_norm, s_.low_rank_eps, C, row);
    std::copy(src + C, src + C + R, row + C);
    if (s_.use_rope) s_.rope.apply(row + C, pos + t);
  }
  std::vector<float> o(size_t(T * H * V)), qabs(static_cast<size_t>(C)), ctx(static_cast<size_t>(C)), p;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n = pos + t + 1;
    for (int64_t h = 0; h < H; ++h) {
      float* qn = q.data() + t * qw + h * qh;
      float* qpe = qn + N;
      if (s_.use_rope) s_.rope.apply(qpe, pos + t);
      // q_abs = W_UK[h]^T q_nope: the query expressed against the latent.
      std::fill(qabs.begin(), qabs.end(), 0.0f);
      matvec_transposed_acc(w_.kv_b.slice_rows(h * (N + V), N), qn, qabs.data());
      p.resize(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        const float* cj = cache.row(0, j);
        p[size_t(j)] = (ops::dot(qabs.data(), cj, C) + ops::dot(qpe, cj + C, R)) * s_.scale;
      }
      ops::softmax(p.data(), n);
      std::fill(ctx.begin(), ctx.end(), 0.0f);
      for (int64_t j = 0; j < n; ++j) ops::axpy(p[size_t(j)], cache.row(0, j), ctx.data(), C);
      matvec(w_.kv_b.slice_rows(h * (N + V) + N, V), ctx.data(), o.data() + t * H * V + h * V);
    }
  }
  if (w_.gate.rows > 0) {
    std::vector<float> g(size_t(T * H * V));
    matmul(w_.gate, x, T, D, g.data(), H * V);
    for (size_t i = 0; i < g.size(); ++i) o[i] *= ops::sigmoid(g[i]);
  }
  matmul(w_.o, o.data(), T, H * V, out, w_.o.rows);
}

}  // namespace sluice
