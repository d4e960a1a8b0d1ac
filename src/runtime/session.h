// A conversation with a model: the token history and the cached state.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "model/model.h"
#include "runtime/session_image.h"

namespace sluice {

class SessionMirror;

// Under mpirun's serve and chat, rank 0's sessions are mirrored on the other
// ranks (runtime/session_mirror.h): each operation below that changes the
// state is sent to them first and done there too, passes included.
class Session {
 public:
  explicit Session(const Model& model);
  // A session that is never mirrored (a follower's copy, SessionReplica).
  struct NotMirrored {};
  Session(const Model& model, NotMirrored);
  ~Session();
  Session(Session&& other) noexcept;  // the mirrors' copy moves with it
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const Model& model() const { return model_; }
  uint64_t id() const { return id_; }  // unique in the process: what a mirror names it by
  int64_t position() const { return state_->pos; }
  const std::vector<int32_t>& tokens() const { return tokens_; }

  // Feeds tokens; returns the logits of the last one ([vocab]). Tokens beyond the
  // model's context (ModelInfo::max_positions) are refused before any is fed.
  // `stop` (optional) is polled before each piece (prefill_piece()) and between
  // the layers and chunks of each pass; when it says stop, feed() throws
  // sluice::Cancelled and the session holds the pieces fed before that one
  // (tokens() and the state agree; no logits), as if only they had been fed.
  // Polling it changes no value.
  const std::vector<float>& feed(const std::vector<int32_t>& tokens, const std::function<bool()>& stop = {});
  // Feeds tokens and returns logits for every one of them ([T, vocab]).
  std::vector<float> feed_all(const std::vector<int32_t>& tokens, ForwardTrace* trace = nullptr);
  const std::vector<float>& last_logits() const { return logits_; }
  int64_t state_bytes() const { return state_->bytes(); }
  // Mark a rollback point; rollback(keep) later keeps only `keep` of the tokens
  // fed since the innermost open mark and closes it. Marks nest (see State).
  // record=false suits a mark kept open over a long generation: recurrent
  // state then keeps no per-token records, and rolling back to keep a prefix
  // feeds that prefix again (KV caches simply drop rows either way).
  void checkpoint(bool record = true);
  void rollback(int64_t keep);
  void commit();  // closes the innermost mark, keeping everything fed since
  size_t open_checkpoints() const { return checkpoint_tokens_.size(); }
  // The state after every token fed, in host memory (open marks are not part of it).
  SessionImage image() const;
  // Becomes `image` cut to its first `positions` tokens (any prefix when
  // image.can_cut(), else all of them), with no mark open and no logits: the
  // next feed() continues bit for bit as the session the image was taken
  // from would have. Throws sluice::Error saying what does not fit (layer
  // count or shapes of another model, a token outside the vocabulary, the
  // context), leaving the session as it was.
  void restore(const SessionImage& image, int64_t positions);
  // From now on every pass copies the outputs of decoder `layers` for its
  // positions into hidden_capture() (model/model.h HiddenCapture), which a
  // drafter reading the target's hidden states takes them from. Set it before
  // the prompt is fed: rows of positions fed earlier are not there.
  void capture_hidden(std::vector<int64_t> layers);
  HiddenCapture* hidden_capture() const { return state_->capture.get(); }
  // restore(image(), positions): the session cut to its first `positions` tokens
  // (mirrored ranks cut their own copy instead of receiving the image).
  void cut(int64_t positions);
  // Long inputs are fed in chunks of at most this many tokens (each chunk reads
  // every distinct expert it needs once). 0: no limit.
  void set_prefill_chunk(int64_t n) { chunk_ = n; }
  int64_t prefill_chunk() const { return chunk_; }
  // Longer inputs go in spans of up to this many tokens, each layer by layer with
  // chunks of prefill_chunk() (Model::forward_span: a span reads each distinct
  // expert once per layer, the same bits). Default: the model's prefill_span();
  // 0: chunk by chunk.
  void set_prefill_span(int64_t n) { span_ = n; }
  int64_t prefill_span() const { return span_ < 0 ? model_.prefill_span() : span_; }
  // The tokens feed() gives one pass over the layers: a span, or a chunk.
  int64_t prefill_piece() const;

  // Feeds sessions[i] tokens[i] (each not empty), all in one forward pass of
  // their shared model: several conversations decoded together, each layer's
  // weights and the union of their experts read once. Afterwards each
  // session's last_logits() are exactly what feeding it alone would give.
  // Every session is checked against the context first; a refused batch
  // changes none of them. The tokens go in one pass whatever the prefill chunk.
  static void feed_together(std::span<Session* const> sessions, std::span<const std::vector<int32_t>> tokens);

 private:
  void check_fits(size_t n) const;
  void pass(const int32_t* tokens, int64_t n, float* out, const std::function<bool()>& stop);
  void feed_chunks(const std::vector<int32_t>& tokens);  // feed() without stop, not mirrored
  void restore_here(const SessionImage& image, int64_t positions);
  const Model& model_;
  SessionMirror* mirror_ = nullptr;  // rank 0 of mirrored ranks
  uint64_t id_ = 0;                  // the name the mirrors know it by
  std::unique_ptr<State> state_;
  std::vector<int32_t> tokens_;
  std::vector<float> logits_;
  int64_t chunk_ = 64;
  int64_t span_ = -1;  // the model's
  std::vector<size_t> checkpoint_tokens_;  // tokens() size at each open mark
};

int32_t argmax(const float* v, int64_t n);  // lowest index among ties

// Greedy decoding: feeds `prompt`, then appends up to max_new argmax tokens,
// stopping after an end-of-sequence id unless ignore_eos. on_token is called per token.
std::vector<int32_t> generate_greedy(Session& s, const std::vector<int32_t>& prompt, int64_t max_new, bool ignore_eos,
                                     const std::function<void(int32_t)>& on_token = {});

}  // namespace sluice
