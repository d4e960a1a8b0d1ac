#include "model/moe.h"

#include <algorithm>

#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace sluice {

void MoeBlock::run_expert(const ExpertWeights& ew, const float* X, int64_t n, int64_t width, float* Y) const {
  if (ew.gate_up_interleaved) {
    const int64_t I2 = ew.gate.rows, I = I2 / 2;
    std::vector<float> gu(size_t(n * I2)), h(size_t(n * I));
    matmul(ew.gate, X, n, width, gu.data(), I2);
    for (int64_t t = 0; t < n; ++t) {
      float* row = gu.data() + t * I2;
      if (ew.gate_up_bias) ops::add(ew.gate_up_bias, row, I2);
      for (int64_t j = 0; j < I; ++j) h[size_t(t * I + j)] = act_(row[2 * j], row[2 * j + 1]);
    }
    matmul(ew.down, h.data(), n, I, Y, width);
  } else {
    const int64_t I = ew.gate.rows;
    std::vector<float> g(size_t(n * I)), u(size_t(n * I));
    matmul(ew.gate, X, n, width, g.data(), I);
    matmul(ew.up, X, n, width, u.data(), I);
    for (size_t i = 0; i < g.size(); ++i) g[i] = act_(g[i], u[i]);
    matmul(ew.down, g.data(), n, I, Y, width);
  }
  if (ew.down_bias)
    for (int64_t t = 0; t < n; ++t) ops::add(ew.down_bias, Y + t * width, width);
}

void MoeBlock::route_tokens(const float* x, int64_t T, std::vector<int32_t>& ids, std::vector<float>& weights) const {
  const int64_t D = router_.cols, E = spec_.n_experts, K = spec_.top_k;
  std::vector<float> logits(static_cast<size_t>(T * E));
  matmul(router_, x, T, D, logits.data(), E);
  ids.resize(size_t(T * K));
  weights.resize(size_t(T * K));
  for (int64_t t = 0; t < T; ++t) {
    float* lg = logits.data() + t * E;
    if (router_bias_) ops::add(router_bias_, lg, E);
    route(spec_, lg, ids.data() + t * K, weights.data() + t * K);
  }
}

void MoeBlock::prefetch_hint(const float* x, int64_t T) const {
  std::vector<int32_t> ids;
  std::vector<float> w;
  route_tokens(x, T, ids, w);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  experts_->source->prefetch(layer_, ids.data(), int64_t(ids.size()));
}

void MoeBlock::forward(const float* x, int64_t T, float* out) const {
  const int64_t D = router_.cols, E = spec_.n_experts, K = spec_.top_k;
  ExpertSource& src = *experts_->source;
  std::vector<int32_t> ids;
  std::vector<float> wts;
  route_tokens(x, T, ids, wts);
  // Tokens per expert; the distinct experts are requested at once so reads start now.
  std::vector<std::vector<std::pair<int64_t, float>>> users(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j) users[size_t(ids[size_t(t * K + j)])].push_back({t, wts[size_t(t * K + j)]});
  std::vector<int32_t> chosen;
  for (int32_t e = 0; e < int32_t(E); ++e)
    if (!users[size_t(e)].empty()) chosen.push_back(e);
  src.request(layer_, chosen.data(), int64_t(chosen.size()));

  // Work that needs no routed expert, overlapping the reads.
  const float* xin = x;
  int64_t W = D;
  std::vector<float> latent_in;
  if (latent_) {
    W = latent_->down.rows;
    latent_in.resize(size_t(T * W));
    matmul(latent_->down, x, T, D, latent_in.data(), W);
    xin = latent_in.data();
  }
  std::vector<float> shared_out;
  if (shared_) {
    shared_out.resize(size_t(T * D));
    shared_->forward(x, T, shared_out.data());
  }

  // Each chosen expert once over its tokens, resident ones first.
  std::vector<std::vector<float>> outputs(chosen.size());
  std::vector<bool> done(chosen.size(), false);
  std::vector<float> X;
  for (size_t remaining = chosen.size(); remaining > 0; --remaining) {
    size_t pick = chosen.size();
    for (size_t i = 0; i < chosen.size() && pick == chosen.size(); ++i)
      if (!done[i] && src.ready(layer_, chosen[i])) pick = i;
    if (pick == chosen.size())
      for (size_t i = 0; i < chosen.size() && pick == chosen.size(); ++i)
        if (!done[i]) pick = i;
    const int32_t e = chosen[pick];
    const auto& u = users[size_t(e)];
    const int64_t n = int64_t(u.size());
    X.resize(size_t(n * W));
    for (int64_t i = 0; i < n; ++i)
      std::copy(xin + u[size_t(i)].first * W, xin + (u[size_t(i)].first + 1) * W, X.begin() + i * W);
    outputs[pick].resize(size_t(n * W));
    const ExpertWeights& ew = src.acquire(layer_, e);
    run_expert(ew, X.data(), n, W, outputs[pick].data());
    src.release(layer_, e);
    done[pick] = true;
  }
  // Weighted sum in expert-id order: identical whatever the arrival order was.
  std::vector<float> acc(static_cast<size_t>(T * W), 0.0f);
  for (size_t i = 0; i < chosen.size(); ++i) {
    const auto& u = users[size_t(chosen[i])];
    for (size_t r = 0; r < u.size(); ++r)
      ops::axpy(u[r].second, outputs[i].data() + r * size_t(W), acc.data() + u[r].first * W, W);
  }
  if (latent_) {
    for (int64_t t = 0; t < T; ++t)
      if (latent_->norm) ops::rmsnorm(acc.data() + t * W, latent_->norm, latent_->eps, W, acc.data() + t * W);
    matmul(latent_->up, acc.data(), T, W, out, D);
  } else {
    std::copy(acc.begin(), acc.end(), out);
  }
  if (shared_) ops::add(shared_out.data(), out, T * D);
}

}  // namespace sluice
