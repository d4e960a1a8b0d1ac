#include "model/gqa_attention.h"

#include <cmath>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/kv_cache.h"

namespace sluice {

std::unique_ptr<LayerState> GqaAttention::new_state() const {
  return std::make_unique<RowCache>(std::vector<int64_t>{s_.n_kv_heads * s_.head_dim, s_.n_kv_heads * s_.head_dim});
}

void GqaAttention::forward(const float* x, int64_t T, int64_t pos, LayerState& state, float* out) const {
  auto& cache = static_cast<RowCache&>(state);
  const int64_t H = s_.n_heads, KV = s_.n_kv_heads, hd = s_.head_dim, D = w_.q.cols;
  const int64_t qw = H * hd, kw = KV * hd;
  std::vector<float> q(size_t(T * qw)), k(size_t(T * kw)), v(size_t(T * kw));
  matmul(w_.q, x, T, D, q.data(), qw);
  matmul(w_.k, x, T, D, k.data(), kw);
  matmul(w_.v, x, T, D, v.data(), kw);
  cache.resize(pos + T);
  for (int64_t t = 0; t < T; ++t) {
    float* qt = q.data() + t * qw;
    float* kt = k.data() + t * kw;
    float* vt = v.data() + t * kw;
    if (w_.q_bias) ops::add(w_.q_bias, qt, qw);
    if (w_.k_bias) ops::add(w_.k_bias, kt, kw);
    if (w_.v_bias) ops::add(w_.v_bias, vt, kw);
    for (int64_t h = 0; h < H; ++h) {
      if (w_.q_norm) ops::rmsnorm(qt + h * hd, w_.q_norm, s_.norm_eps, hd, qt + h * hd);
      s_.rope.apply(qt + h * hd, pos + t);
    }
    for (int64_t h = 0; h < KV; ++h) {
      if (w_.k_norm) ops::rmsnorm(kt + h * hd, w_.k_norm, s_.norm_eps, hd, kt + h * hd);
      s_.rope.apply(kt + h * hd, pos + t);
    }
    std::copy(kt, kt + kw, cache.row(0, pos + t));
    std::copy(vt, vt + kw, cache.row(1, pos + t));
  }
  std::vector<float> o(size_t(T * qw), 0.0f), p;
  const int64_t group = H / KV;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t qpos = pos + t;
    const int64_t start = s_.window > 0 ? std::max<int64_t>(0, qpos - s_.window + 1) : 0;
    const int64_t n = qpos - start + 1;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / group;
      const float* qh = q.data() + t * qw + h * hd;
      p.assign(size_t(n + 1), 0.0f);
      for (int64_t j = 0; j < n; ++j) p[size_t(j)] = ops::dot(qh, cache.row(0, start + j) + kvh * hd, hd) * s_.scale;
      // A sink is one extra logit in the softmax whose probability is dropped.
      if (w_.sinks) p[size_t(n)] = w_.sinks[h];
      ops::softmax(p.data(), w_.sinks ? n + 1 : n);
      float* oh = o.data() + t * qw + h * hd;
      for (int64_t j = 0; j < n; ++j) ops::axpy(p[size_t(j)], cache.row(1, start + j) + kvh * hd, oh, hd);
    }
  }
  matmul(w_.o, o.data(), T, qw, out, w_.o.rows);
  if (w_.o_bias)
    for (int64_t t = 0; t < T; ++t) ops::add(w_.o_bias, out + t * w_.o.rows, w_.o.rows);
}

}  // namespace sluice
