#include "runtime/session.h"

#include <algorithm>
#include <atomic>

#include "util/cancelled.h"
#include "util/error.h"

namespace sluice {

// Refused before any work, so a feed that does not fit leaves the session as it was.
void Session::check_fits(size_t n) const {
  const int64_t limit = model_.info().max_positions;
  if (limit > 0 && position() + int64_t(n) > limit)
    fail("{} tokens at position {} do not fit in the model's context of {} positions (max_position_embeddings)", n,
         position(), limit);
}

const std::vector<float>& Session::feed(const std::vector<int32_t>& tokens, const std::function<bool()>& stop) {
  if (tokens.empty()) fail("nothing to feed: empty token list");
  check_fits(tokens.size());
  logits_.resize(size_t(model_.info().vocab));
  const int64_t T = int64_t(tokens.size()), piece = prefill_piece(), step = piece > 0 ? piece : T;
  // A piece longer than a chunk goes layer by layer (bit for bit the chunks' result).
  auto pass = [&](int64_t b, int64_t n, float* out) {
    if (chunk_ > 0 && n > chunk_) model_.forward_span(*state_, tokens.data() + b, n, chunk_, out);
    else model_.forward(*state_, tokens.data() + b, n, out, false);
  };
  for (int64_t b = 0; b < T; b += step) {
    const int64_t n = std::min(step, T - b);
    float* out = b + n == T ? logits_.data() : nullptr;
    if (!stop) {
      pass(b, n, out);
    } else {
      // A pass stopped between layers leaves some layers fed: the mark taken
      // before it returns every layer to the chunk's start (rollback is exact).
      if (stop()) {
        logits_.clear();
        throw Cancelled();
      }
      state_->checkpoint(/*record=*/false);
      state_->stop = &stop;
      try {
        pass(b, n, out);
      } catch (...) {
        state_->stop = nullptr;
        state_->rollback(0);
        logits_.clear();
        throw;
      }
      state_->stop = nullptr;
      state_->commit();
    }
    tokens_.insert(tokens_.end(), tokens.begin() + b, tokens.begin() + b + n);
  }
  return logits_;
}

int64_t Session::prefill_piece() const {
  const int64_t span = prefill_span();
  return chunk_ > 0 && span > chunk_ ? span : chunk_;
}

std::vector<float> Session::feed_all(const std::vector<int32_t>& tokens, ForwardTrace* trace) {
  if (tokens.empty()) fail("nothing to feed: empty token list");
  check_fits(tokens.size());
  const int64_t V = model_.info().vocab, T = int64_t(tokens.size());
  std::vector<float> all(size_t(T * V));
  const int64_t step = chunk_ > 0 ? chunk_ : T;
  for (int64_t b = 0; b < T; b += step) {
    ForwardTrace part;
    const int64_t n = std::min(step, T - b);
    model_.forward(*state_, tokens.data() + b, n, all.data() + b * V, true, trace ? &part : nullptr);
    if (trace) {
      trace->hidden.resize(part.hidden.size());
      for (size_t l = 0; l < part.hidden.size(); ++l)
        trace->hidden[l].insert(trace->hidden[l].end(), part.hidden[l].begin(), part.hidden[l].end());
      trace->final_hidden.insert(trace->final_hidden.end(), part.final_hidden.begin(), part.final_hidden.end());
    }
  }
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  logits_.assign(all.end() - V, all.end());
  return all;
}

void Session::feed_together(std::span<Session* const> sessions, std::span<const std::vector<int32_t>> tokens) {
  if (sessions.size() != tokens.size())
    fail("feed_together: {} sessions but {} token lists", sessions.size(), tokens.size());
  if (sessions.empty()) return;
  const Model& model = sessions[0]->model_;
  std::vector<SequenceFeed> feeds;
  for (size_t i = 0; i < sessions.size(); ++i) {
    Session& s = *sessions[i];
    if (&s.model_ != &model) fail("feed_together: session {} belongs to another model", i);
    if (tokens[i].empty()) fail("nothing to feed: empty token list for session {}", i);
    s.check_fits(tokens[i].size());
    s.logits_.resize(size_t(model.info().vocab));
    feeds.push_back({s.state_.get(), tokens[i].data(), int64_t(tokens[i].size()), s.logits_.data(), false});
  }
  model.forward_batch(feeds);
  for (size_t i = 0; i < sessions.size(); ++i)
    sessions[i]->tokens_.insert(sessions[i]->tokens_.end(), tokens[i].begin(), tokens[i].end());
}

void Session::checkpoint(bool record) {
  state_->checkpoint(record);
  checkpoint_tokens_.push_back(tokens_.size());
}

void Session::rollback(int64_t keep) {
  if (checkpoint_tokens_.empty()) fail("rollback without a checkpoint");
  const size_t at = checkpoint_tokens_.back();
  if (keep < 0 || at + size_t(keep) > tokens_.size())
    fail("cannot keep {} tokens after the checkpoint: {} were fed since", keep, tokens_.size() - at);
  if (keep > 0 && !state_->can_keep()) {
    // Back to the mark, then the kept tokens again.
    const std::vector<int32_t> again(tokens_.begin() + std::ptrdiff_t(at), tokens_.begin() + std::ptrdiff_t(at) + keep);
    state_->rollback(0);
    tokens_.resize(at);
    checkpoint_tokens_.pop_back();
    feed(again);
    return;
  }
  state_->rollback(keep);
  tokens_.resize(at + size_t(keep));
  checkpoint_tokens_.pop_back();
}

SessionImage Session::image() const {
  SessionImage im;
  im.tokens = tokens_;
  for (const auto& l : state_->layers) im.layers.push_back(l ? l->save() : std::vector<SavedTensor>{});
  return im;
}

void Session::restore(const SessionImage& image, int64_t positions) {
  if (positions < 0 || positions > image.positions())
    fail("cannot restore {} positions of a state that holds {}", positions, image.positions());
  if (positions < image.positions() && !image.can_cut())
    fail("this model's state is recurrent: it can be restored only at the {} positions saved, not {}",
         image.positions(), positions);
  const int64_t limit = model_.info().max_positions;
  if (limit > 0 && positions > limit)
    fail("a state of {} positions does not fit in the model's context of {}", positions, limit);
  const int64_t vocab = model_.info().vocab;
  for (int64_t i = 0; i < positions; ++i)
    if (image.tokens[size_t(i)] < 0 || image.tokens[size_t(i)] >= vocab)
      fail("token {} at position {} is outside the model's vocabulary of {}", image.tokens[size_t(i)], i, vocab);
  // Built aside and swapped in, so a refused image changes nothing.
  std::unique_ptr<State> st = model_.new_state();
  if (st->layers.size() != image.layers.size())
    fail("the state has {} layers, this model {}", image.layers.size(), st->layers.size());
  for (size_t l = 0; l < st->layers.size(); ++l) {
    if (!st->layers[l]) {
      if (!image.layers[l].empty()) fail("layer {}: state saved for a layer that keeps none", l);
      continue;
    }
    try {
      st->layers[l]->restore(image.layers[l], positions);
    } catch (const Error& e) {
      fail("layer {}: {}", l, e.what());
    }
  }
  st->pos = positions;
  if (state_->capture) {  // the restored positions' rows were never captured
    st->capture = std::move(state_->capture);
    st->capture->rows.clear();
    st->capture->start = positions;
    st->capture->changed_from = 0;
  }
  state_ = std::move(st);
  tokens_.assign(image.tokens.begin(), image.tokens.begin() + positions);
  logits_.clear();
  checkpoint_tokens_.clear();
}

void Session::capture_hidden(std::vector<int64_t> layers) {
  static std::atomic<uint64_t> captures{0};
  auto c = std::make_unique<HiddenCapture>();
  c->id = ++captures;
  c->layers = std::move(layers);
  c->hidden = model_.info().hidden;
  c->start = state_->pos;
  state_->capture = std::move(c);
}

void Session::commit() {
  state_->commit();
  checkpoint_tokens_.pop_back();
}

int32_t argmax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return int32_t(best);
}

std::vector<int32_t> generate_greedy(Session& s, const std::vector<int32_t>& prompt, int64_t max_new, bool ignore_eos,
                                     const std::function<void(int32_t)>& on_token) {
  std::vector<int32_t> out;
  if (max_new <= 0) return out;
  const auto& eos = s.model().info().eos_ids;
  const std::vector<float>* lg = &s.feed(prompt);
  for (int64_t i = 0; i < max_new; ++i) {
    int32_t next = argmax(lg->data(), int64_t(lg->size()));
    out.push_back(next);
    if (on_token) on_token(next);
    if (!ignore_eos && std::find(eos.begin(), eos.end(), next) != eos.end()) break;
    if (i + 1 < max_new) lg = &s.feed({next});
  }
  return out;
}

}  // namespace sluice
