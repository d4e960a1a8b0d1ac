#include "model/moe.h"

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

void MoeBlock::forward(const float* x, int64_t T, float* out) const {
  const int64_t D = router_.cols, E = spec_.n_experts, K = spec_.top_k;
  // Routing for every token.
  std::vector<float> logits(size_t(T * E));
  matmul(router_, x, T, D, logits.data(), E);
  std::vector<int32_t> ids(size_t(T * K));
  std::vector<float> wts(size_t(T * K));
  for (int64_t t = 0; t < T; ++t) {
    float* lg = logits.data() + t * E;
    if (router_bias_) ops::add(router_bias_, lg, E);
    route(spec_, lg, ids.data() + t * K, wts.data() + t * K);
  }
  // Expert input: the full hidden state, or its latent projection.
  const float* xin = x;
  int64_t W = D;
  std::vector<float> latent_in;
  if (latent_) {
    W = latent_->down.rows;
    latent_in.resize(size_t(T * W));
    matmul(latent_->down, x, T, D, latent_in.data(), W);
    xin = latent_in.data();
  }
  // Tokens per expert, then one batched evaluation per selected expert.
  std::vector<std::vector<std::pair<int64_t, float>>> users(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j) users[size_t(ids[size_t(t * K + j)])].push_back({t, wts[size_t(t * K + j)]});
  std::vector<float> acc(size_t(T * W), 0.0f), X, Y;
  for (int64_t e = 0; e < E; ++e) {
    const auto& u = users[size_t(e)];
    if (u.empty()) continue;
    const int64_t n = int64_t(u.size());
    X.resize(size_t(n * W));
    Y.resize(size_t(n * W));
    for (int64_t i = 0; i < n; ++i) std::copy(xin + u[size_t(i)].first * W, xin + (u[size_t(i)].first + 1) * W, X.begin() + i * W);
    run_expert(experts_[size_t(e)], X.data(), n, W, Y.data());
    for (int64_t i = 0; i < n; ++i) ops::axpy(u[size_t(i)].second, Y.data() + i * W, acc.data() + u[size_t(i)].first * W, W);
  }
  if (latent_) {
    for (int64_t t = 0; t < T; ++t)
      if (latent_->norm) ops::rmsnorm(acc.data() + t * W, latent_->norm, latent_->eps, W, acc.data() + t * W);
    matmul(latent_->up, acc.data(), T, W, out, D);
  } else {
    std::copy(acc.begin(), acc.end(), out);
  }
  if (shared_) {
    std::vector<float> s(size_t(T * D));
    shared_->forward(x, T, s.data());
    ops::add(s.data(), out, T * D);
  }
}

}  // namespace sluice
