#include "model/decoder.h"

#include <algorithm>
#include <cmath>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/finite_check.h"
#include "util/error.h"

namespace sluice {

void State::rollback(int64_t keep) {
  if (checkpoints.empty()) fail("rollback without a checkpoint");
  const int64_t at = checkpoints.back().pos;
  if (keep < 0 || at + keep > pos || (keep > 0 && !can_keep()))
    fail("rollback to {} tokens after the checkpoint at {} is not possible at position {}", keep, at, pos);
  for (auto& l : layers)
    if (l) l->rollback(keep);
  checkpoints.pop_back();
  pos = at + keep;
}

void State::commit() {
  if (checkpoints.empty()) fail("commit without a checkpoint");
  for (auto& l : layers)
    if (l) l->commit();
  checkpoints.pop_back();
}

void embed_tokens(const QMatrix& embed, const int32_t* tokens, int64_t T, float* out) {
  for (int64_t t = 0; t < T; ++t) {
    if (tokens[t] < 0 || tokens[t] >= embed.rows)
      fail("token id {} at position {} is outside the vocabulary [0, {})", tokens[t], t, embed.rows);
    decode_row_ref(embed, tokens[t], out + t * embed.cols);
  }
}

Decoder::Decoder(ModelInfo info, std::unique_ptr<Checkpoint> ckpt, std::string prefix)
    : info_(std::move(info)),
      ckpt_(std::move(ckpt)),
      weights_(std::make_unique<WeightLoader>(*ckpt_, prefix)),
      slot_(std::make_shared<ExpertSourceSlot>()) {
  slot_->source = &table_;
}

void Decoder::set_expert_source(std::unique_ptr<ExpertSource> source) {
  installed_source_ = std::move(source);
  slot_->source = installed_source_ ? installed_source_.get() : &table_;
}

void Decoder::prefetch_next(size_t l, const float* h, int64_t T) const {
  if (!prefetch_ || l + 1 >= layers_.size()) return;
  const Layer& next = layers_[l + 1];
  const int64_t D = info_.hidden;
  std::vector<float> xn(static_cast<size_t>(T * D));
  for (int64_t t = 0; t < T; ++t) ops::rmsnorm(h + t * D, next.ffn_norm, eps_, D, xn.data() + t * D);
  next.ffn->prefetch_hint(xn.data(), T);
}

void Decoder::set_embedding(QMatrix embed, QMatrix lm_head, const float* final_norm, float eps) {
  embed_ = embed;
  lm_head_ = lm_head;
  final_norm_ = final_norm;
  eps_ = eps;
}

std::unique_ptr<State> Decoder::new_state() const {
  auto st = std::make_unique<State>();
  for (const auto& l : layers_) st->layers.push_back(l.attn->new_state());
  return st;
}

void Decoder::forward_residual(State& state, float* h, int64_t T, ForwardTrace* trace) const {
  const int64_t D = info_.hidden;
  std::vector<float> xn(static_cast<size_t>(T * D)), tmp(static_cast<size_t>(T * D));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    if (hooks_) hooks_->before_layer(int64_t(l));
    for (int64_t t = 0; t < T; ++t) ops::rmsnorm(h + t * D, L.attn_norm, eps_, D, xn.data() + t * D);
    L.attn->forward(xn.data(), T, state.pos, *state.layers[l], tmp.data());
    ops::add(tmp.data(), h, T * D);
    for (int64_t t = 0; t < T; ++t) ops::rmsnorm(h + t * D, L.ffn_norm, eps_, D, xn.data() + t * D);
    L.ffn->forward(xn.data(), T, tmp.data());
    ops::add(tmp.data(), h, T * D);
    if (hooks_) hooks_->after_layer(int64_t(l));
    check_finite(h, T, D, state.pos, int64_t(l));
    prefetch_next(l, h, T);
    if (trace) trace->hidden[l].insert(trace->hidden[l].end(), h, h + T * D);
  }
}

namespace {
// AttnRes(sources; wn, wp) per token: softmax over sources of wp . RMSNorm(V_i; wn),
// then the weighted sum of the raw sources.
void attn_res_mix(const std::vector<const float*>& sources, const float* wn, const float* wp, float eps, int64_t T,
                  int64_t D, float* out) {
  const size_t n = sources.size();
  std::vector<float> w(n);
  for (int64_t t = 0; t < T; ++t) {
    for (size_t i = 0; i < n; ++i) {
      const float* v = sources[i] + t * D;
      double ss = 0.0, dot = 0.0;
      for (int64_t d = 0; d < D; ++d) {
        ss += double(v[d]) * v[d];
        dot += double(wp[d]) * wn[d] * v[d];
      }
      w[i] = float(dot / std::sqrt(ss / double(D) + double(eps)));
    }
    ops::softmax(w.data(), int64_t(n));
    float* o = out + t * D;
    std::fill(o, o + D, 0.0f);
    for (size_t i = 0; i < n; ++i) ops::axpy(w[i], sources[i] + t * D, o, D);
  }
}
}  // namespace

void Decoder::forward_attn_res(State& state, float* h, int64_t T, ForwardTrace* trace) const {
  const int64_t D = info_.hidden, B = attn_res_.block_size;
  const size_t TD = static_cast<size_t>(T * D);
  // Completed block representations (the embedding is the first), the current
  // block's partial sum p, and scratch.
  std::vector<std::vector<float>> blocks;
  std::vector<float> p(TD), x(TD), xn(TD), a(TD), f(TD);
  bool p_empty = false;
  auto sources = [&](const std::vector<float>& last) {
    std::vector<const float*> s;
    for (const auto& b : blocks) s.push_back(b.data());
    s.push_back(last.data());
    return s;
  };
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    if (hooks_) hooks_->before_layer(int64_t(l));
    std::copy(h, h + TD, p.begin());
    if (blocks.empty()) std::copy(h, h + TD, x.begin());
    else attn_res_mix(sources(p), L.attn_res_norm, L.attn_res_proj, attn_res_.eps, T, D, x.data());
    p_empty = false;
    if (int64_t(l) % B == 0) {  // block boundary: snapshot, restart the partial sum
      blocks.emplace_back(h, h + TD);
      p_empty = true;
    }
    for (int64_t t = 0; t < T; ++t) ops::rmsnorm(x.data() + t * D, L.attn_norm, eps_, D, xn.data() + t * D);
    L.attn->forward(xn.data(), T, state.pos, *state.layers[l], a.data());
    if (p_empty) std::copy(a.begin(), a.end(), p.begin());
    else ops::add(a.data(), p.data(), int64_t(TD));
    attn_res_mix(sources(p), L.ffn_res_norm, L.ffn_res_proj, attn_res_.eps, T, D, x.data());
    for (int64_t t = 0; t < T; ++t) ops::rmsnorm(x.data() + t * D, L.ffn_norm, eps_, D, xn.data() + t * D);
    L.ffn->forward(xn.data(), T, f.data());
    for (size_t i = 0; i < TD; ++i) h[i] = p[i] + f[i];
    if (hooks_) hooks_->after_layer(int64_t(l));
    check_finite(h, T, D, state.pos, int64_t(l));
    prefetch_next(l, h, T);
    if (trace) trace->hidden[l].insert(trace->hidden[l].end(), h, h + TD);
  }
  std::vector<float> last(h, h + TD);
  attn_res_mix(sources(last), attn_res_.out_norm, attn_res_.out_proj, attn_res_.eps, T, D, h);
}

void Decoder::forward(State& state, const int32_t* tokens, int64_t T, float* logits, bool all_logits,
                      ForwardTrace* trace) const {
  const int64_t D = info_.hidden;
  if (T <= 0) return;
  if (info_.max_positions > 0 && state.pos + T > info_.max_positions)
    fail("sequence of {} tokens exceeds the model's {} positions", state.pos + T, info_.max_positions);
  std::vector<float> h(static_cast<size_t>(T * D)), xn(static_cast<size_t>(T * D));
  embed_tokens(embed_, tokens, T, h.data());
  if (trace) trace->hidden.resize(layers_.size());
  if (attn_res_.block_size > 0) forward_attn_res(state, h.data(), T, trace);
  else forward_residual(state, h.data(), T, trace);
  state.pos += T;
  for (int64_t t = 0; t < T; ++t) ops::rmsnorm(h.data() + t * D, final_norm_, eps_, D, xn.data() + t * D);
  if (trace) trace->final_hidden.insert(trace->final_hidden.end(), xn.begin(), xn.end());
  if (!logits) return;
  if (all_logits) matmul(lm_head_, xn.data(), T, D, logits, info_.vocab);
  else matvec(lm_head_, xn.data() + (T - 1) * D, logits);
  if (all_logits) check_finite(logits, T, info_.vocab, state.pos - T, -1);
  else check_finite(logits, 1, info_.vocab, state.pos - 1, -1);
}

}  // namespace sluice
