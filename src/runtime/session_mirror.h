// Under mpirun, `serve` and `chat` keep their model state on every rank: rank
// 0 decides (requests, the prompt cache, cancellation, timing) and every other
// rank replays what rank 0 does to its sessions, so that each rank enters the
// model's passes (collectives: one exchange per MoE layer) in the same order
// with the same tokens. Session is where all of that funnels through, so this
// is the seam: a mirrored Session tells the mirror each operation on its state
// before doing it, and the mirror (cluster/, MPI) sends it to the other ranks,
// which apply it to their copy (SessionReplica, fed by cluster/session_followers.h).
//
// Without a mirror (one process, or a rank that follows) Session does nothing
// of this.
#pragma once
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <mutex>
#include <span>
#include <vector>

#include "model/model.h"
#include "runtime/session_image.h"

namespace sluice {

// One operation on a session's state, as the ranks that follow replay it.
struct SessionOp {
  enum Kind : uint8_t { Open, Close, Feed, FeedAll, FeedTogether, Checkpoint, Rollback, Commit, Restore, Cut, Stop };
  Kind kind = Open;
  std::vector<uint64_t> ids;                // the session (several for FeedTogether)
  int64_t value = 0;  // Open: model index; Feed: the piece's tokens; Checkpoint: record; Rollback: keep; Restore, Cut: positions
  int64_t chunk = 0;                        // the session's prefill chunk for this operation
  int64_t span = 0;                         // Rollback: the session's prefill span (feeding again)
  std::vector<std::vector<int32_t>> tokens;  // Feed, FeedAll: one list; FeedTogether: one per session
  const SessionImage* image = nullptr;      // Restore

  static SessionOp on(Kind kind, uint64_t id, int64_t value = 0, int64_t chunk = 0) {
    SessionOp op;
    op.kind = kind;
    op.ids = {id};
    op.value = value;
    op.chunk = chunk;
    return op;
  }
};

class SessionMirror {
 public:
  virtual ~SessionMirror() = default;
  // Held from an operation's send() until the operation is done on this rank:
  // one operation (and the collectives in its passes) at a time, in one order
  // on every rank, whichever thread does it.
  virtual std::unique_lock<std::recursive_mutex> hold() = 0;
  // Which of the mirrored models `model` is (the same index on every rank), -1: none.
  virtual int32_t model_index(const Model& model) const = 0;
  // Sends `op` to the ranks that follow (throws sluice::Error when they are lost).
  virtual void send(const SessionOp& op) = 0;
  // A pass sent to the followers failed here (not a refusal: those come
  // before send): their copies may hold what this one does not, or they may
  // be waiting in the pass's exchange. Ends the job unless the ranks are lost already.
  virtual void failed(const std::exception& e) = 0;
};

// The process's mirror: null unless rank 0 of an mpirun job serves or chats. Not owned.
SessionMirror* session_mirror();
void set_session_mirror(SessionMirror* mirror);

// The wire form of one operation (a Restore carries its image).
std::string encode_session_op(const SessionOp& op);
struct DecodedSessionOp {
  SessionOp op;
  SessionImage image;  // op.image points here (a Restore)
  DecodedSessionOp() = default;
  DecodedSessionOp(const DecodedSessionOp&) = delete;
};
// Throws sluice::Error for bytes that are not one operation.
void decode_session_op(const std::string& bytes, DecodedSessionOp& out);

class Session;

// A follower's copy of the mirrored sessions: applies each operation as the
// mirrored session did it (its own sessions are not mirrored).
class SessionReplica {
 public:
  explicit SessionReplica(std::vector<const Model*> models);
  ~SessionReplica();
  // False for Stop. Throws sluice::Error when the operation cannot be done
  // here (then this copy no longer matches the mirrored sessions).
  bool apply(const SessionOp& op);
  size_t sessions() const { return sessions_.size(); }
  const Session* find(uint64_t id) const;

 private:
  Session& session(uint64_t id);
  std::vector<const Model*> models_;
  std::map<uint64_t, std::unique_ptr<Session>> sessions_;
};

}  // namespace sluice
