#include "model/mla_attention.h"

#include "model/kv_cache.h"
#include "model/weights.h"

namespace sluice {

MlaWeights load_mla_weights(const WeightLoader& W, const TensorNames& N, int64_t l, const MlaSpec& s, int64_t D,
                            bool output_gate) {
  using R = TensorRole;
  MlaWeights w;
  const int64_t qh = s.nope + s.rope_dim;
  if (s.q_lora > 0) {
    w.q_a = W.linear(N(R::AttnQA, l), s.q_lora, D);
    w.q_a_norm = W.vec(N(R::AttnQANorm, l), s.q_lora);
    w.q_b = W.linear(N(R::AttnQB, l), s.n_heads * qh, s.q_lora);
  } else {
    w.q = W.linear(N(R::AttnQ, l), s.n_heads * qh, D);
  }
  w.kv_a = W.linear(N(R::AttnKvA, l), s.kv_lora + s.rope_dim, D);
  w.kv_a_norm = W.vec(N(R::AttnKvANorm, l), s.kv_lora);
  w.kv_b = W.linear(N(R::AttnKvB, l), s.n_heads * (s.nope + s.v_dim), s.kv_lora);
  w.o = W.linear(N(R::AttnO, l), D, s.n_heads * s.v_dim);
  if (output_gate) w.gate = W.linear(N(R::AttnGate, l), s.n_heads * s.v_dim, D);
  return w;
}

std::unique_ptr<LayerState> MlaAttention::new_state() const {
  return std::make_unique<RowCache>(be_, std::vector<int64_t>{s_.kv_lora + s_.rope_dim});
}

void MlaAttention::forward(Tensor x, std::span<const SequenceRows> seqs, Tensor out) const {
  const int64_t H = s_.n_heads, C = s_.kv_lora, R = s_.rope_dim, N = s_.nope, V = s_.v_dim;
  const int64_t T = x.rows(), qh = N + R, qw = H * qh;
  Buffer q(be_, T, qw);
  if (s_.q_lora > 0) {
    Buffer qa(be_, T, s_.q_lora);
    be_.matmul(w_.q_a, x, qa);
    be_.rmsnorm(qa, w_.q_a_norm, s_.low_rank_eps, qa);
    be_.matmul(w_.q_b, qa, q);
  } else {
    be_.matmul(w_.q, x, q);
  }
  Buffer kva(be_, T, C + R);
  be_.matmul(w_.kv_a, x, kva);
  Buffer o(be_, T, H * V);
  const MlaShape shape{.n_heads = H, .kv_lora = C, .nope = N, .rope_dim = R, .v_dim = V, .scale = s_.scale};
  for (const SequenceRows& sq : seqs) {
    auto& cache = static_cast<RowCache&>(*sq.state);
    const Tensor kv = kva.row_range(sq.row0, sq.rows), qs = q.row_range(sq.row0, sq.rows);
    // Cache rows: the normalised latent, then the (rotated) shared key.
    cache.resize(sq.pos + sq.rows);
    const Tensor rows = cache.rows(0, sq.pos, sq.rows);
    be_.rmsnorm(kv.col_range(0, C), w_.kv_a_norm, s_.low_rank_eps, rows.col_range(0, C));
    be_.copy(kv.col_range(C, R), rows.col_range(C, R));
    if (s_.use_rope) {
      be_.rope(s_.rope, rows.col_range(C, R), 1, R, 0, sq.pos);
      be_.rope(s_.rope, qs, H, qh, N, sq.pos);
    }
    be_.mla_attend(shape, w_.kv_b, qs, cache.rows(0, 0, sq.pos + sq.rows), sq.pos, o.row_range(sq.row0, sq.rows));
  }
  if (!w_.gate.empty()) {
    Buffer g(be_, T, H * V);
    be_.matmul(w_.gate, x, g);
    be_.mul_sigmoid(g, o);
  }
  be_.matmul(w_.o, o, out);
}

}  // namespace sluice
