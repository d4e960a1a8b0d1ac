#include "runtime/session.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "runtime/session_mirror.h"
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

namespace {
std::atomic<uint64_t> g_next_id{1};
std::mutex g_mirror_mutex;  // session_mirror()
SessionMirror* g_mirror = nullptr;
}  // namespace

// Runs a pass already sent to the followers: a failure here leaves them out of step (SessionMirror::failed).
template <class F>
void sent_pass(SessionMirror* mirror, F&& pass) {
  if (!mirror) return pass();
  try {
    pass();
  } catch (const std::exception& e) {
    mirror->failed(e);
    throw;
  }
}

SessionMirror* session_mirror() {
  std::lock_guard lock(g_mirror_mutex);
  return g_mirror;
}
void set_session_mirror(SessionMirror* mirror) {
  std::lock_guard lock(g_mirror_mutex);
  g_mirror = mirror;
}

Session::Session(const Model& model) : model_(model), id_(g_next_id++) {
  if (SessionMirror* m = session_mirror()) {
    const int32_t index = m->model_index(model);
    // A session the other ranks do not mirror would enter its passes alone and wait for them forever.
    if (index < 0) fail("internal: a session of a model the ranks do not mirror");
    mirror_ = m;
    auto hold = m->hold();
    m->send(SessionOp::on(SessionOp::Open, id_, index));
    state_ = model.new_state();
    return;
  }
  state_ = model.new_state();
}

Session::Session(Session&& o) noexcept
    : model_(o.model_), mirror_(o.mirror_), id_(o.id_), state_(std::move(o.state_)), tokens_(std::move(o.tokens_)),
      logits_(std::move(o.logits_)), chunk_(o.chunk_), span_(o.span_),
      checkpoint_tokens_(std::move(o.checkpoint_tokens_)) {
  o.mirror_ = nullptr;
}

Session::Session(const Model& model, NotMirrored) : model_(model), id_(g_next_id++), state_(model.new_state()) {}

Session::~Session() {
  if (!mirror_) return;
  try {
    auto hold = mirror_->hold();
    mirror_->send(SessionOp::on(SessionOp::Close, id_));
  } catch (...) {  // the ranks are lost: nothing left to tell them
  }
}

// One pass over a piece of n tokens (the logits of the last into `out`, unless
// null): a piece longer than a chunk goes layer by layer (bit for bit the
// chunks' result). With `stop`: polled between the layers; when it says stop,
// Cancelled is thrown with the state as before the pass.
void Session::pass(const int32_t* tokens, int64_t n, float* out, const std::function<bool()>& stop) {
  const auto run = [&] {
    if (chunk_ > 0 && n > chunk_) model_.forward_span(*state_, tokens, n, chunk_, out);
    else model_.forward(*state_, tokens, n, out, false);
  };
  if (!stop) return run();
  // A pass stopped between layers leaves some layers fed: the mark taken
  // before it returns every layer to the chunk's start (rollback is exact).
  state_->checkpoint(/*record=*/false);
  state_->stop = &stop;
  try {
    run();
  } catch (...) {
    state_->stop = nullptr;
    state_->rollback(0);
    throw;
  }
  state_->stop = nullptr;
  state_->commit();
}

const std::vector<float>& Session::feed(const std::vector<int32_t>& tokens, const std::function<bool()>& stop) {
  if (tokens.empty()) fail("nothing to feed: empty token list");
  check_fits(tokens.size());
  logits_.resize(size_t(model_.info().vocab));
  const int64_t T = int64_t(tokens.size()), piece = prefill_piece(), step = piece > 0 ? piece : T;
  for (int64_t b = 0; b < T; b += step) {
    const int64_t n = std::min(step, T - b);
    float* out = b + n == T ? logits_.data() : nullptr;
    if (stop && stop()) {
      logits_.clear();
      throw Cancelled();
    }
    try {
      if (mirror_) {
        // Each piece is its own operation, decided here: the ranks stop only
        // between pieces (within one, every rank must finish its layers). The
        // followers feed it as one piece too: a span of n tokens when it is
        // longer than a chunk, else one chunk (their passes must be these).
        auto hold = mirror_->hold();
        SessionOp op = SessionOp::on(SessionOp::Feed, id_, n, chunk_);
        op.tokens = {std::vector<int32_t>(tokens.begin() + b, tokens.begin() + b + n)};
        mirror_->send(op);
        sent_pass(mirror_, [&] { pass(tokens.data() + b, n, out, {}); });
      } else {
        pass(tokens.data() + b, n, out, stop);
      }
    } catch (...) {
      logits_.clear();
      throw;
    }
    tokens_.insert(tokens_.end(), tokens.begin() + b, tokens.begin() + b + n);
  }
  return logits_;
}

void Session::feed_chunks(const std::vector<int32_t>& tokens) {
  check_fits(tokens.size());
  logits_.resize(size_t(model_.info().vocab));
  const int64_t T = int64_t(tokens.size()), piece = prefill_piece(), step = piece > 0 ? piece : T;
  for (int64_t b = 0; b < T; b += step) {
    const int64_t n = std::min(step, T - b);
    pass(tokens.data() + b, n, b + n == T ? logits_.data() : nullptr, {});
    tokens_.insert(tokens_.end(), tokens.begin() + b, tokens.begin() + b + n);
  }
}

std::vector<float> Session::feed_all(const std::vector<int32_t>& tokens, ForwardTrace* trace) {
  if (tokens.empty()) fail("nothing to feed: empty token list");
  check_fits(tokens.size());
  std::unique_lock<std::recursive_mutex> hold;
  if (mirror_) {
    hold = mirror_->hold();
    SessionOp op = SessionOp::on(SessionOp::FeedAll, id_, 0, chunk_);
    op.tokens = {tokens};
    mirror_->send(op);
  }
  const int64_t V = model_.info().vocab, T = int64_t(tokens.size());
  std::vector<float> all(size_t(T * V));
  const int64_t step = chunk_ > 0 ? chunk_ : T;
  for (int64_t b = 0; b < T; b += step) {
    ForwardTrace part;
    const int64_t n = std::min(step, T - b);
    sent_pass(mirror_, [&] {
      model_.forward(*state_, tokens.data() + b, n, all.data() + b * V, true, trace ? &part : nullptr);
    });
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
  std::unique_lock<std::recursive_mutex> hold;
  if (SessionMirror* m = sessions[0]->mirror_) {
    hold = m->hold();
    SessionOp op;
    op.kind = SessionOp::FeedTogether;
    for (size_t i = 0; i < sessions.size(); ++i) {
      op.ids.push_back(sessions[i]->id_);
      op.tokens.push_back(tokens[i]);
    }
    m->send(op);
  }
  sent_pass(sessions[0]->mirror_, [&] { model.forward_batch(feeds); });
  for (size_t i = 0; i < sessions.size(); ++i)
    sessions[i]->tokens_.insert(sessions[i]->tokens_.end(), tokens[i].begin(), tokens[i].end());
}

void Session::checkpoint(bool record) {
  std::unique_lock<std::recursive_mutex> hold;
  if (mirror_) {
    hold = mirror_->hold();
    mirror_->send(SessionOp::on(SessionOp::Checkpoint, id_, record ? 1 : 0));
  }
  state_->checkpoint(record);
  checkpoint_tokens_.push_back(tokens_.size());
}

void Session::rollback(int64_t keep) {
  if (checkpoint_tokens_.empty()) fail("rollback without a checkpoint");
  const size_t at = checkpoint_tokens_.back();
  if (keep < 0 || at + size_t(keep) > tokens_.size())
    fail("cannot keep {} tokens after the checkpoint: {} were fed since", keep, tokens_.size() - at);
  std::unique_lock<std::recursive_mutex> hold;
  if (mirror_) {  // the ranks that follow feed the kept tokens again too, in chunks of the same size
    hold = mirror_->hold();
    SessionOp op = SessionOp::on(SessionOp::Rollback, id_, keep, chunk_);
    op.span = prefill_span();  // this rank's, resolved: each host's plan may give another
    mirror_->send(op);
  }
  if (keep > 0 && !state_->can_keep()) {
    // Back to the mark, then the kept tokens again.
    const std::vector<int32_t> again(tokens_.begin() + std::ptrdiff_t(at), tokens_.begin() + std::ptrdiff_t(at) + keep);
    state_->rollback(0);
    tokens_.resize(at);
    checkpoint_tokens_.pop_back();
    sent_pass(mirror_, [&] { feed_chunks(again); });
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
  std::unique_lock<std::recursive_mutex> hold;
  if (mirror_) hold = mirror_->hold();
  restore_here(image, positions);  // refused here, refused everywhere: sent only once it is done
  if (mirror_) {
    SessionOp op = SessionOp::on(SessionOp::Restore, id_, positions);
    op.image = &image;
    mirror_->send(op);
  }
}

void Session::cut(int64_t positions) {
  std::unique_lock<std::recursive_mutex> hold;
  if (mirror_) hold = mirror_->hold();
  restore_here(image(), positions);
  if (mirror_) mirror_->send(SessionOp::on(SessionOp::Cut, id_, positions));
}

void Session::restore_here(const SessionImage& image, int64_t positions) {
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
  std::unique_lock<std::recursive_mutex> hold;
  if (mirror_) {
    hold = mirror_->hold();
    mirror_->send(SessionOp::on(SessionOp::Commit, id_));
  }
  state_->commit();
  checkpoint_tokens_.pop_back();
}

int64_t Session::prefill_piece() const {
  const int64_t span = prefill_span();
  return chunk_ > 0 && span > chunk_ ? span : chunk_;
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
