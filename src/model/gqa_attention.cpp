#include "model/gqa_attention.h"

#include <cmath>

#include "model/kv_cache.h"
#include "util/error.h"

namespace sluice {

GqaSpec gqa_spec_from_config(const Config& cfg, int64_t hidden, bool kv_heads_required) {
  GqaSpec gs;
  gs.n_heads = cfg.req_int("num_attention_heads");
  gs.n_kv_heads = kv_heads_required ? cfg.req_int("num_key_value_heads") : cfg.get_int("num_key_value_heads", gs.n_heads);
  if (gs.n_heads < 1) fail("{}: num_attention_heads must be at least 1, got {}", cfg.source(), gs.n_heads);
  gs.head_dim = cfg.get_int("head_dim", hidden / gs.n_heads);
  if (gs.head_dim < 1) fail("{}: head_dim must be at least 1, got {}", cfg.source(), gs.head_dim);
  if (gs.n_kv_heads <= 0 || gs.n_heads % gs.n_kv_heads)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", cfg.source(), gs.n_heads,
         gs.n_kv_heads);
  gs.scale = float(1.0 / std::sqrt(double(gs.head_dim)));
  gs.rope = rope_from_config(cfg, gs.head_dim, /*interleaved=*/false);
  return gs;
}

std::unique_ptr<LayerState> GqaAttention::new_state() const {
  return std::make_unique<RowCache>(be_, std::vector<int64_t>{s_.n_kv_heads * s_.head_dim, s_.n_kv_heads * s_.head_dim});
}

void GqaAttention::forward(Tensor x, std::span<const SequenceRows> seqs, Tensor out) const {
  const int64_t H = s_.n_heads, KV = s_.n_kv_heads, hd = s_.head_dim, T = x.rows();
  const int64_t qw = H * hd, kw = KV * hd;
  Buffer q(be_, T, qw), k(be_, T, kw), v(be_, T, kw);
  be_.matmul(w_.q, x, q);
  be_.matmul(w_.k, x, k);
  be_.matmul(w_.v, x, v);
  if (!w_.q_bias.empty()) be_.add_row(w_.q_bias, q);
  if (!w_.k_bias.empty()) be_.add_row(w_.k_bias, k);
  if (!w_.v_bias.empty()) be_.add_row(w_.v_bias, v);
  if (!w_.q_norm.empty()) be_.rmsnorm(q, w_.q_norm, s_.norm_eps, q, hd);
  if (!w_.k_norm.empty()) be_.rmsnorm(k, w_.k_norm, s_.norm_eps, k, hd);
  Buffer o(be_, T, qw);
  const GqaShape shape{.n_heads = H, .n_kv_heads = KV, .head_dim = hd, .scale = s_.scale, .window = s_.window};
  for (const SequenceRows& sq : seqs) {
    auto& cache = static_cast<RowCache&>(*sq.state);
    const Tensor qs = q.row_range(sq.row0, sq.rows), ks = k.row_range(sq.row0, sq.rows);
    be_.rope(s_.rope, qs, H, hd, 0, sq.pos);
    be_.rope(s_.rope, ks, KV, hd, 0, sq.pos);
    cache.resize(sq.pos + sq.rows);
    be_.copy(ks, cache.rows(0, sq.pos, sq.rows));
    be_.copy(v.row_range(sq.row0, sq.rows), cache.rows(1, sq.pos, sq.rows));
    const int64_t n = sq.pos + sq.rows;
    be_.gqa_attend(shape, w_.sinks, qs, cache.rows(0, 0, n), cache.rows(1, 0, n), sq.pos, o.row_range(sq.row0, sq.rows));
  }
  be_.matmul(w_.o, o, out);
  if (!w_.o_bias.empty()) be_.add_row(w_.o_bias, out);
}

}  // namespace sluice
