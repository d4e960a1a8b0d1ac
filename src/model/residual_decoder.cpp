#include "model/residual_decoder.h"

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "util/error.h"

namespace sluice {

void embed_tokens(const QMatrix& embed, const int32_t* tokens, int64_t T, float* out) {
  for (int64_t t = 0; t < T; ++t) {
    if (tokens[t] < 0 || tokens[t] >= embed.rows)
      fail("token id {} at position {} is outside the vocabulary [0, {})", tokens[t], t, embed.rows);
    decode_row_ref(embed, tokens[t], out + t * embed.cols);
  }
}

ResidualDecoder::ResidualDecoder(ModelInfo info, std::unique_ptr<Checkpoint> ckpt, std::string prefix)
    : info_(std::move(info)), ckpt_(std::move(ckpt)), weights_(std::make_unique<WeightLoader>(*ckpt_, prefix)) {}

void ResidualDecoder::set_embedding(QMatrix embed, QMatrix lm_head, const float* final_norm, float eps) {
  embed_ = embed;
  lm_head_ = lm_head;
  final_norm_ = final_norm;
  eps_ = eps;
}

std::unique_ptr<State> ResidualDecoder::new_state() const {
  auto st = std::make_unique<State>();
  for (const auto& l : layers_) st->layers.push_back(l.attn->new_state());
  return st;
}

void ResidualDecoder::forward(State& state, const int32_t* tokens, int64_t T, float* logits, bool all_logits,
                              ForwardTrace* trace) const {
  const int64_t D = info_.hidden;
  if (info_.max_positions > 0 && state.pos + T > info_.max_positions)
    fail("sequence of {} tokens exceeds the model's {} positions", state.pos + T, info_.max_positions);
  std::vector<float> h(size_t(T * D)), xn(size_t(T * D)), tmp(size_t(T * D));
  embed_tokens(embed_, tokens, T, h.data());
  if (trace) trace->hidden.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    for (int64_t t = 0; t < T; ++t) ops::rmsnorm(h.data() + t * D, L.attn_norm, eps_, D, xn.data() + t * D);
    L.attn->forward(xn.data(), T, state.pos, *state.layers[l], tmp.data());
    ops::add(tmp.data(), h.data(), T * D);
    for (int64_t t = 0; t < T; ++t) ops::rmsnorm(h.data() + t * D, L.ffn_norm, eps_, D, xn.data() + t * D);
    L.ffn->forward(xn.data(), T, tmp.data());
    ops::add(tmp.data(), h.data(), T * D);
    if (trace) trace->hidden[l].insert(trace->hidden[l].end(), h.begin(), h.end());
  }
  state.pos += T;
  for (int64_t t = 0; t < T; ++t) ops::rmsnorm(h.data() + t * D, final_norm_, eps_, D, xn.data() + t * D);
  if (trace) trace->final_hidden.insert(trace->final_hidden.end(), xn.begin(), xn.end());
  if (!logits) return;
  if (all_logits) matmul(lm_head_, xn.data(), T, D, logits, info_.vocab);
  else matvec(lm_head_, xn.data() + (T - 1) * D, logits);
}

}  // namespace sluice
