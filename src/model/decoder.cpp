#include "model/decoder.h"

#include <algorithm>

#include "compute/host_experts.h"
#include "model/finite_check.h"
#include "util/cancelled.h"
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
  if (capture) capture->cut(pos);
}

void State::commit() {
  if (checkpoints.empty()) fail("commit without a checkpoint");
  for (auto& l : layers)
    if (l) l->commit();
  checkpoints.pop_back();
}

Decoder::Decoder(ModelInfo info, std::unique_ptr<Checkpoint> ckpt, std::string prefix, Backend& backend)
    : info_(std::move(info)),
      be_(backend),
      ckpt_(std::move(ckpt)),
      weights_(std::make_unique<WeightLoader>(*ckpt_, backend, prefix)),
      slot_(std::make_shared<ExpertSourceSlot>()) {
  slot_->source = &table_;
}

void Decoder::set_expert_source(std::unique_ptr<ExpertSource> source) {
  installed_source_ = std::move(source);
  slot_->source = installed_source_ ? installed_source_.get() : &table_;
}

ExpertStats Decoder::expert_stats() const {
  ExpertStats st = slot_->source->stats();
  if (const HostExperts* h = slot_->host.get()) {
    st.host_expert_calls = h->host_calls;
    st.device_expert_calls = h->device_calls;
    st.host_expert_seconds = h->host_seconds;
  }
  st.routed_expert_seconds = slot_->routed_seconds;
  st.exchange_seconds = slot_->exchange_seconds;
  return st;
}

std::unique_ptr<ExpertSource> Decoder::take_expert_source() {
  slot_->source = &table_;
  return std::move(installed_source_);
}

void Decoder::prefetch_next(size_t l, Tensor h, Tensor scratch, int64_t batch_rows) const {
  if (!prefetch_ || l + 1 >= layers_.size()) return;
  const Layer& next = layers_[l + 1];
  Buffer own;
  if (!scratch.data()) {
    own = Buffer(be_, h.rows(), h.cols());
    scratch = own;
  }
  be_.rmsnorm(h, next.ffn_norm, eps_, scratch);
  next.ffn->prefetch_hint(scratch, batch_rows);
}

// The hidden state after layer l must be finite (model/finite_check.h): checked
// where it is (a GPU returns an index, not the state); only when a value is not
// finite is it read back, each sequence checked at its own positions for the error.
// The rows come back a few at a time (a span's would be as large as its residual stream).
void Decoder::check_layer_finite(std::span<const PassSequence> seqs, size_t l, Tensor h) const {
  if (be_.defers_finite_checks()) {
    be_.watch_nonfinite(h, int64_t(l));
    return;
  }
  if (be_.first_nonfinite(h) < 0) return;
  const int64_t D = h.cols(), step = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(1, D));
  std::vector<float> host;
  for (const PassSequence& s : seqs)
    for (int64_t r = 0; r < s.rows; r += step) {
      const int64_t n = std::min(step, s.rows - r);
      host.resize(size_t(n * D));
      be_.download(h.row_range(s.row0 + r, n), host.data());
      check_finite(host.data(), n, D, s.state->pos + r, int64_t(l));
    }
}

// Before the pass's states advance: the record's row is a row of the pass's activations.
void Decoder::check_watched_finite(std::span<const PassSequence> seqs) const {
  if (!be_.defers_finite_checks()) return;
  const Backend::NonFinite bad = be_.take_nonfinite();
  if (bad.tag < 0) return;
  const int64_t D = info_.hidden, row = bad.index / D;
  for (const PassSequence& s : seqs)
    if (row >= s.row0 && row < s.row0 + s.rows)
      fail_not_finite(bad.value, s.state->pos + (row - s.row0), bad.index % D, bad.tag);
  fail("internal: the finite check recorded row {} of a pass of {} rows", row, seqs.empty() ? 0 : seqs.back().row0 + seqs.back().rows);
}

void Decoder::check_stop(std::span<const PassSequence> seqs) {
  for (const PassSequence& s : seqs)
    if (s.state->stop && *s.state->stop && (*s.state->stop)()) throw Cancelled();
}

void Decoder::trace_layer(ForwardTrace* trace, size_t l, Tensor h) const {
  if (!trace) return;
  auto& out = trace->hidden[l];
  const size_t at = out.size();
  out.resize(at + size_t(h.rows() * h.cols()));
  be_.download(h, out.data() + at);
}

// Checks each sequence's hidden-state capture against the model and makes room for the pass's rows.
void Decoder::prepare_captures(std::span<const PassSequence> seqs) const {
  const int64_t D = info_.hidden;
  for (const PassSequence& s : seqs)
    if (HiddenCapture* c = s.state->capture.get()) {
      if (c->hidden != D) fail("hidden-state capture of width {} on a model of hidden size {}", c->hidden, D);
      for (int64_t layer : c->layers)
        if (layer < 0 || layer >= layers()) fail("hidden-state capture of layer {}: the model has {}", layer, layers());
      c->rows.resize(size_t((s.state->pos + s.rows - c->start) * c->width()));
    }
}

// Copies the rows of h after layer l into the captures of the sequences that
// ask for it (a download of rows already computed: no value changes).
void Decoder::capture_layer(std::span<const PassSequence> seqs, size_t l, Tensor h) const {
  for (const PassSequence& s : seqs) {
    HiddenCapture* c = s.state->capture.get();
    const int64_t col = c ? c->column_of(int64_t(l)) : -1;
    if (col < 0) continue;
    const int64_t D = h.cols(), W = c->width();
    std::vector<float> part(size_t(s.rows * D));
    be_.download(h.row_range(s.row0, s.rows), part.data());
    float* dst = c->rows.data() + (s.state->pos - c->start) * W + col;
    for (int64_t r = 0; r < s.rows; ++r) std::copy_n(part.data() + r * D, D, dst + r * W);
  }
}

void Decoder::set_embedding(Matrix embed, Matrix lm_head, Vector final_norm, float eps) {
  embed_ = embed;
  lm_head_ = lm_head;
  final_norm_ = final_norm;
  eps_ = eps;
}

uint64_t Decoder::state_bytes_per_token() const {
  uint64_t n = 0;
  for (const auto& l : layers_) n += l.attn->state_bytes_per_token();
  return n;
}

uint64_t Decoder::state_bytes_fixed() const {
  uint64_t n = 0;
  for (const auto& l : layers_) n += l.attn->state_bytes_fixed();
  return n;
}

uint64_t Decoder::activation_bytes_per_token() const {
  const int64_t D = info_.hidden;
  // h, xn, the block output and the host copy of h for the finite check; with
  // Block AttnRes p, x, a, f, the final mix's input and one snapshot per block.
  int64_t stream = 4 * D;
  if (attn_res_.block_size > 0) stream += (5 + layers() / attn_res_.block_size + 1) * D;
  int64_t block = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const int32_t li = int32_t(l);
    const int64_t routed = li < table_.layers() && table_.experts(li) > 0 ? table_.at(li, 0).gate.rows() : 0;
    block = std::max({block, layers_[l].attn->activation_floats_per_token(),
                      layers_[l].ffn->activation_floats_per_token(routed)});
  }
  return uint64_t(stream + block) * sizeof(float);
}

std::unique_ptr<State> Decoder::new_state() const {
  auto st = std::make_unique<State>();
  for (const auto& l : layers_) st->layers.push_back(l.attn->new_state());
  return st;
}

std::vector<SequenceRows> Decoder::layer_rows(std::span<const PassSequence> seqs, size_t l) const {
  std::vector<SequenceRows> rows;
  for (const auto& s : seqs) rows.push_back({s.state->layers[l].get(), s.state->pos, s.row0, s.rows});
  return rows;
}

void Decoder::forward_residual(std::span<const PassSequence> seqs, Tensor h, ForwardTrace* trace) const {
  Buffer xn(be_, h.rows(), h.cols()), tmp(be_, h.rows(), h.cols());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    check_stop(seqs);
    if (hooks_) hooks_->before_layer(int64_t(l));
    be_.rmsnorm(h, L.attn_norm, eps_, xn);
    L.attn->forward(xn, layer_rows(seqs, l), tmp);
    be_.add(tmp, h);
    be_.rmsnorm(h, L.ffn_norm, eps_, xn);
    L.ffn->forward(xn, tmp);
    be_.add(tmp, h);
    if (hooks_) hooks_->after_layer(int64_t(l));
    check_layer_finite(seqs, l, h);
    prefetch_next(l, h);
    trace_layer(trace, l, h);
    capture_layer(seqs, l, h);
    if (on_layer_) on_layer_(int64_t(l));
  }
}

void Decoder::forward_attn_res(std::span<const PassSequence> seqs, Tensor h, ForwardTrace* trace) const {
  const int64_t R = h.rows(), D = h.cols(), B = attn_res_.block_size;
  // Completed block representations (the embedding is the first), the current
  // block's partial sum p, and scratch.
  std::vector<Buffer> blocks;
  Buffer p(be_, R, D), x(be_, R, D), xn(be_, R, D), a(be_, R, D), f(be_, R, D);
  bool p_empty = false;
  auto sources = [&](Tensor last) {
    std::vector<Tensor> s;
    for (const auto& b : blocks) s.push_back(b);
    s.push_back(last);
    return s;
  };
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    check_stop(seqs);
    if (hooks_) hooks_->before_layer(int64_t(l));
    be_.copy(h, p);
    if (blocks.empty()) be_.copy(h, x);
    else be_.attn_res_mix(sources(p), L.attn_res_norm, L.attn_res_proj, attn_res_.eps, x);
    p_empty = false;
    if (int64_t(l) % B == 0) {  // block boundary: snapshot, restart the partial sum
      blocks.emplace_back(be_, R, D);
      be_.copy(h, blocks.back());
      p_empty = true;
    }
    be_.rmsnorm(x, L.attn_norm, eps_, xn);
    L.attn->forward(xn, layer_rows(seqs, l), a);
    if (p_empty) be_.copy(a, p);
    else be_.add(a, p);
    be_.attn_res_mix(sources(p), L.ffn_res_norm, L.ffn_res_proj, attn_res_.eps, x);
    be_.rmsnorm(x, L.ffn_norm, eps_, xn);
    L.ffn->forward(xn, f);
    be_.copy(p, h);  // h = p + f
    be_.add(f, h);
    if (hooks_) hooks_->after_layer(int64_t(l));
    check_layer_finite(seqs, l, h);
    prefetch_next(l, h);
    trace_layer(trace, l, h);
    capture_layer(seqs, l, h);
    if (on_layer_) on_layer_(int64_t(l));
  }
  Buffer last(be_, R, D);
  be_.copy(h, last);
  be_.attn_res_mix(sources(last), attn_res_.out_norm, attn_res_.out_proj, attn_res_.eps, h);
}

void Decoder::check_feed(const State& state, const int32_t* tokens, int64_t T) const {
  if (info_.max_positions > 0 && state.pos + T > info_.max_positions)
    fail("sequence of {} tokens exceeds the model's {} positions", state.pos + T, info_.max_positions);
  for (int64_t t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= embed_.rows())
      fail("token id {} at position {} is outside the vocabulary [0, {})", tokens[t], t, embed_.rows());
}

void Decoder::forward(State& state, const int32_t* tokens, int64_t T, float* logits, bool all_logits,
                      ForwardTrace* trace) const {
  const SequenceFeed feed{&state, tokens, T, logits, all_logits};
  forward_pass({&feed, 1}, trace);
}

void Decoder::forward_batch(std::span<const SequenceFeed> feeds) const { forward_pass(feeds, nullptr); }

// The rows of every sequence in one pass: sequence i's tokens are rows
// [row0_i, row0_i + n_i) of the activations, in feed order.
void Decoder::forward_pass(std::span<const SequenceFeed> feeds, ForwardTrace* trace) const {
  const int64_t D = info_.hidden, V = info_.vocab;
  std::vector<PassSequence> seqs;
  std::vector<const SequenceFeed*> fed;
  int64_t R = 0;
  for (const SequenceFeed& f : feeds) {
    if (f.n <= 0) continue;
    for (const PassSequence& s : seqs)
      if (s.state == f.state) fail("forward pass: the same sequence state is fed twice in one pass");
    check_feed(*f.state, f.tokens, f.n);
    seqs.push_back({f.state, R, f.n});
    fed.push_back(&f);
    R += f.n;
  }
  if (R == 0) return;
  std::vector<int32_t> tokens(static_cast<size_t>(R));
  for (size_t i = 0; i < seqs.size(); ++i)
    std::copy(fed[i]->tokens, fed[i]->tokens + fed[i]->n, tokens.begin() + seqs[i].row0);
  prepare_captures(seqs);
  Buffer h(be_, R, D), xn(be_, R, D);
  if (be_.defers_finite_checks()) be_.clear_nonfinite();  // a pass cut short (cancelled) left its record
  be_.embed(embed_, tokens.data(), R, h);
  if (trace) trace->hidden.resize(layers_.size());
  if (attn_res_.block_size > 0) forward_attn_res(seqs, h, trace);
  else forward_residual(seqs, h, trace);
  // With deferred checks the record is read after the logits' download (one wait for both).
  const auto advance = [&] {
    check_watched_finite(seqs);
    for (const PassSequence& s : seqs) s.state->pos += s.rows;
  };
  be_.rmsnorm(h, final_norm_, eps_, xn);
  if (trace) {
    const size_t at = trace->final_hidden.size();
    trace->final_hidden.resize(at + size_t(R * D));
    be_.download(xn, trace->final_hidden.data() + at);
  }
  // The rows whose logits are wanted, through the head in one product.
  std::vector<int64_t> want;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!fed[i]->logits) continue;
    if (fed[i]->all_logits)
      for (int64_t r = 0; r < seqs[i].rows; ++r) want.push_back(seqs[i].row0 + r);
    else
      want.push_back(seqs[i].row0 + seqs[i].rows - 1);
  }
  if (want.empty()) {
    advance();
    return;
  }
  Buffer picked;
  Tensor rows;
  if (want.size() == 1) {
    rows = xn.row_range(want[0], 1);
  } else if (int64_t(want.size()) == R) {
    rows = xn.view();
  } else {
    picked = Buffer(be_, int64_t(want.size()), D);
    be_.gather_rows(xn, want, picked);
    rows = picked;
  }
  Buffer out(be_, rows.rows(), V);
  be_.matmul(lm_head_, rows, out);
  // The head's rows are in feed order; a single caller gets them directly.
  const auto wanting = std::count_if(fed.begin(), fed.end(), [](const SequenceFeed* f) { return f->logits; });
  float* direct = nullptr;
  for (const SequenceFeed* f : fed)
    if (wanting == 1 && f->logits) direct = f->logits;
  std::vector<float> host(direct ? 0 : size_t(rows.rows() * V));
  be_.download(out, direct ? direct : host.data());
  advance();
  int64_t at = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!fed[i]->logits) continue;
    const int64_t n = fed[i]->all_logits ? seqs[i].rows : 1;
    if (!direct) std::copy_n(host.data() + at * V, n * V, fed[i]->logits);
    check_finite(fed[i]->logits, n, V, seqs[i].state->pos - n, -1);
    at += n;
  }
}

}  // namespace sluice
