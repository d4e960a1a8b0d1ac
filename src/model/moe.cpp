#include "model/moe.h"

#include <algorithm>

namespace sluice {

void MoeBlock::route_tokens(Tensor x, std::vector<int32_t>& ids, std::vector<float>& weights) const {
  const int64_t T = x.rows(), E = spec_.n_experts, K = spec_.top_k;
  // The router's logits come to the host: the choice of experts is host logic.
  Buffer logits_dev(be_, T, E);
  be_.matmul(router_, x, logits_dev);
  std::vector<float> logits(static_cast<size_t>(T * E));
  be_.download(logits_dev, logits.data());
  ids.resize(size_t(T * K));
  weights.resize(size_t(T * K));
  for (int64_t t = 0; t < T; ++t) {
    float* lg = logits.data() + t * E;
    if (router_bias_)
      for (int64_t e = 0; e < E; ++e) lg[e] += router_bias_[e];
    route(spec_, lg, ids.data() + t * K, weights.data() + t * K);
  }
}

// Router logits (device and host), the latent input, the shared expert's
// output and scratch, every chosen expert's output (alive until the weighted
// sum), one expert's gathered input and gate/up scratch for up to every row,
// and the sum.
int64_t MoeBlock::activation_floats_per_token(int64_t routed_width) const {
  const int64_t D = router_.cols(), W = latent_ ? latent_->down.rows() : D, K = spec_.top_k;
  const int64_t shared = shared_ ? D + shared_->activation_floats_per_token(0) : 0;
  return 2 * spec_.n_experts + W + shared + K * W + W + 2 * routed_width + W;
}

void MoeBlock::prefetch_hint(Tensor x) const {
  std::vector<int32_t> ids;
  std::vector<float> w;
  route_tokens(x, ids, w);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  experts_->source->prefetch(layer_, ids.data(), int64_t(ids.size()));
}

void MoeBlock::forward(Tensor x, Tensor out) const {
  const int64_t T = x.rows(), D = router_.cols(), E = spec_.n_experts, K = spec_.top_k;
  ExpertSource& src = *experts_->source;
  std::vector<int32_t> ids;
  std::vector<float> wts;
  route_tokens(x, ids, wts);
  // Tokens per expert; the distinct experts are requested at once so reads start now.
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(E));
  std::vector<std::vector<float>> weights(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j) {
      const int32_t e = ids[size_t(t * K + j)];
      rows[size_t(e)].push_back(t);
      weights[size_t(e)].push_back(wts[size_t(t * K + j)]);
    }
  std::vector<int32_t> chosen;
  for (int32_t e = 0; e < int32_t(E); ++e)
    if (!rows[size_t(e)].empty()) chosen.push_back(e);
  if (experts_->on_request) experts_->on_request(layer_, chosen.data(), int64_t(chosen.size()));
  src.request(layer_, chosen.data(), int64_t(chosen.size()));

  // Work that needs no routed expert, overlapping the reads.
  Tensor xin = x;
  int64_t W = D;
  Buffer latent_in;
  if (latent_) {
    W = latent_->down.rows();
    latent_in = Buffer(be_, T, W);
    be_.matmul(latent_->down, x, latent_in);
    xin = latent_in;
  }
  Buffer shared_out;
  if (shared_) {
    shared_out = Buffer(be_, T, D);
    shared_->forward(x, shared_out);
  }

  // Each chosen expert once over its tokens, resident ones first.
  std::vector<Buffer> outputs(chosen.size());
  std::vector<bool> done(chosen.size(), false);
  for (size_t remaining = chosen.size(); remaining > 0; --remaining) {
    size_t pick = chosen.size();
    for (size_t i = 0; i < chosen.size() && pick == chosen.size(); ++i)
      if (!done[i] && src.ready(layer_, chosen[i])) pick = i;
    if (pick == chosen.size())
      for (size_t i = 0; i < chosen.size() && pick == chosen.size(); ++i)
        if (!done[i]) pick = i;
    const int32_t e = chosen[pick];
    const int64_t n = int64_t(rows[size_t(e)].size());
    Buffer X(be_, n, W);
    be_.gather_rows(xin, rows[size_t(e)], X);
    outputs[pick] = Buffer(be_, n, W);
    const ExpertWeights& ew = src.acquire(layer_, e);
    be_.expert_ffn(ew, act_, X, outputs[pick]);
    src.release(layer_, e);
    done[pick] = true;
  }
  // Weighted sum in expert-id order: identical whatever the arrival order was.
  Buffer acc(be_, T, W);
  for (size_t i = 0; i < chosen.size(); ++i)
    be_.scatter_add(outputs[i], rows[size_t(chosen[i])], weights[size_t(chosen[i])], acc);
  if (latent_) {
    if (!latent_->norm.empty()) be_.rmsnorm(acc, latent_->norm, latent_->eps, acc);
    be_.matmul(latent_->up, acc, out);
  } else {
    be_.copy(acc, out);
  }
  if (shared_) be_.add(shared_out, out);
}

}  // namespace sluice
