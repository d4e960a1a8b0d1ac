// A long prefill of one sequence, layer by layer (Decoder::forward_span): every
// layer runs over all the span's tokens before the next starts. Attention goes
// chunk by chunk in order (a chunk's keys and values are the earlier chunks'
// and its own, exactly as in chunk-by-chunk passes); the feed-forward block runs
// over the whole span, so a MoE layer reads each chosen expert once for the span
// and a streamed spine layer is read once, not once per chunk. Every other step
// is row by row, and the products give a row the same bits whatever the batch:
// the logits and the state are bit for bit those of forward() over the chunks.
#include <algorithm>

#include "model/decoder.h"
#include "model/finite_check.h"
#include "util/error.h"

namespace sluice {

void Model::forward_span(State& state, const int32_t* tokens, int64_t T, int64_t chunk, float* logits) const {
  const int64_t step = chunk > 0 ? chunk : T;
  for (int64_t b = 0; b < T; b += step) {
    const int64_t n = std::min(step, T - b);
    forward(state, tokens + b, n, b + n == T ? logits : nullptr, false);
  }
}

uint64_t Decoder::span_bytes_per_token() const {
  const int64_t D = info_.hidden;
  // h and the feed-forward input (its output is written over it); with Block AttnRes
  // one snapshot per block (the current block's partial sum is h itself).
  int64_t floats = 2 * D;
  if (attn_res_.block_size > 0) floats += (layers() + attn_res_.block_size - 1) / attn_res_.block_size * D;
  int64_t ffn = 0;
  for (const Layer& L : layers_) ffn = std::max(ffn, L.ffn->span_floats_per_token());
  return uint64_t(floats + ffn) * sizeof(float);
}

void Decoder::forward_span(State& state, const int32_t* tokens, int64_t T, int64_t chunk, float* logits) const {
  if (T <= 0) return;
  const int64_t c = chunk > 0 ? std::min(chunk, T) : T;
  if (c >= T || layers_.empty()) {  // one chunk: the ordinary pass
    forward(state, tokens, T, logits, false, nullptr);
    return;
  }
  check_feed(state, tokens, T);
  const PassSequence whole{&state, 0, T};
  prepare_captures({&whole, 1});
  const int64_t D = info_.hidden, pos0 = state.pos;
  Buffer h(be_, T, D), xn(be_, T, D);
  if (be_.defers_finite_checks()) be_.clear_nonfinite();
  be_.embed(embed_, tokens, T, h);
  if (attn_res_.block_size > 0) span_attn_res(state, pos0, c, h, xn);
  else span_residual(state, pos0, c, h, xn);
  check_watched_finite({&whole, 1});
  state.pos += T;
  // Only the last token's logits: its row alone through the final norm and the head.
  Tensor last = Tensor(h).row_range(T - 1, 1), last_n = Tensor(xn).row_range(T - 1, 1);
  be_.rmsnorm(last, final_norm_, eps_, last_n);
  if (!logits) return;
  Buffer out(be_, 1, info_.vocab);
  be_.matmul(lm_head_, last_n, out);
  be_.download(out, logits);
  check_finite(logits, 1, info_.vocab, state.pos - 1, -1);
}

// Plain residual stream: h += Attn(RMSNorm(h)) chunk by chunk; h += FFN(RMSNorm(h)) over the
// span, the feed-forward output written over its input xn.
void Decoder::span_residual(State& state, int64_t pos0, int64_t c, Tensor h, Tensor xn) const {
  const int64_t T = h.rows(), D = h.cols();
  const PassSequence whole{&state, 0, T};
  Buffer tmp(be_, c, D);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    check_stop({&whole, 1});
    if (hooks_) hooks_->before_layer(int64_t(l));
    for (int64_t r = 0; r < T; r += c) {
      const int64_t n = std::min(c, T - r);
      if (r > 0) check_stop({&whole, 1});
      const Tensor hr = h.row_range(r, n), xr = xn.row_range(r, n), tr = Tensor(tmp).row_range(0, n);
      be_.rmsnorm(hr, L.attn_norm, eps_, xr);
      const SequenceRows rows{state.layers[l].get(), pos0 + r, 0, n};
      L.attn->forward(xr, {&rows, 1}, tr);
      be_.add(tr, hr);
    }
    be_.rmsnorm(h, L.ffn_norm, eps_, xn);
    L.ffn->forward_span(xn, xn, c);
    be_.add(xn, h);
    if (hooks_) hooks_->after_layer(int64_t(l));
    check_layer_finite({&whole, 1}, l, h);
    capture_layer({&whole, 1}, l, h);
    prefetch_next(l, h, xn, c);
    if (on_layer_) on_layer_(int64_t(l));
  }
}

// Block AttnRes (see forward_attn_res, whose steps these are, in the same order per row).
// forward_attn_res keeps the block's partial sum p apart from h, but every layer starts with
// p = h and h is not read again until it becomes p + f: here h is that partial sum (the
// same values in the same operations), and the feed-forward output is written over its input.
void Decoder::span_attn_res(State& state, int64_t pos0, int64_t c, Tensor h, Tensor xn) const {
  const int64_t T = h.rows(), D = h.cols(), B = attn_res_.block_size;
  const PassSequence whole{&state, 0, T};
  std::vector<Buffer> blocks;  // completed block representations (the embedding is the first)
  Buffer x(be_, c, D), xc(be_, c, D), a(be_, c, D);
  auto rows_of = [](const std::vector<Buffer>& bs, size_t count, Tensor last, int64_t r, int64_t n) {
    std::vector<Tensor> s;
    for (size_t i = 0; i < count; ++i) s.push_back(bs[i].row_range(r, n));
    s.push_back(last.row_range(r, n));
    return s;
  };
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    check_stop({&whole, 1});
    if (hooks_) hooks_->before_layer(int64_t(l));
    const size_t before = blocks.size();
    const bool boundary = int64_t(l) % B == 0;  // snapshot h, restart the partial sum
    if (boundary) blocks.emplace_back(be_, T, D);
    for (int64_t r = 0; r < T; r += c) {
      const int64_t n = std::min(c, T - r);
      if (r > 0) check_stop({&whole, 1});
      const Tensor hr = h.row_range(r, n);
      const Tensor xr = Tensor(x).row_range(0, n), xcr = Tensor(xc).row_range(0, n), ar = Tensor(a).row_range(0, n);
      if (before == 0) be_.copy(hr, xr);
      else be_.attn_res_mix(rows_of(blocks, before, h, r, n), L.attn_res_norm, L.attn_res_proj, attn_res_.eps, xr);
      if (boundary) be_.copy(hr, blocks.back().row_range(r, n));
      be_.rmsnorm(xr, L.attn_norm, eps_, xcr);
      const SequenceRows rows{state.layers[l].get(), pos0 + r, 0, n};
      L.attn->forward(xcr, {&rows, 1}, ar);
      if (boundary) be_.copy(ar, hr);
      else be_.add(ar, hr);
      be_.attn_res_mix(rows_of(blocks, blocks.size(), h, r, n), L.ffn_res_norm, L.ffn_res_proj, attn_res_.eps, xr);
      be_.rmsnorm(xr, L.ffn_norm, eps_, xn.row_range(r, n));
    }
    L.ffn->forward_span(xn, xn, c);
    be_.add(xn, h);  // h = p + f
    if (hooks_) hooks_->after_layer(int64_t(l));
    check_layer_finite({&whole, 1}, l, h);
    capture_layer({&whole, 1}, l, h);
    prefetch_next(l, h, xn, c);
    if (on_layer_) on_layer_(int64_t(l));
  }
  // The final mix, for the last row only (the only one whose logits are wanted).
  const Tensor hl = h.row_range(T - 1, 1);
  Buffer last(be_, 1, D);
  be_.copy(hl, last);
  std::vector<Tensor> sources;
  for (const Buffer& b : blocks) sources.push_back(b.row_range(T - 1, 1));
  sources.push_back(last);
  be_.attn_res_mix(sources, attn_res_.out_norm, attn_res_.out_proj, attn_res_.eps, hl);
}

}  // namespace sluice
