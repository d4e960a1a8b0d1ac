#include "cluster/session_followers.h"

#include <fmt/format.h>

#include "util/error.h"

namespace sluice {

class MirroredSessions : public SessionMirror {
 public:
  MirroredSessions(Cluster& cluster, std::vector<const Model*> models) : cluster_(cluster), models_(std::move(models)) {
    cluster_.watch_ranks();
    set_session_mirror(this);
  }
  ~MirroredSessions() override {
    set_session_mirror(nullptr);
    cluster_.unwatch();
    try {
      auto h = hold();
      send(SessionOp::on(SessionOp::Stop, 0));
      cluster_.gather("");  // every rank has stopped watching before any connection closes
    } catch (...) {  // lost: they are not waiting
    }
  }
  std::unique_lock<std::recursive_mutex> hold() override { return std::unique_lock(mutex_); }
  int32_t model_index(const Model& model) const override {
    for (size_t i = 0; i < models_.size(); ++i)
      if (models_[i] == &model) return int32_t(i);
    return -1;
  }
  void send(const SessionOp& op) override {
    std::string bytes = encode_session_op(op);
    cluster_.broadcast(bytes);
  }
  void failed(const std::exception& e) override {
    if (!cluster_.exchange() || !cluster_.exchange()->lost().empty()) return;  // lost: said by every request
    cluster_.abort(fmt::format("a pass the other ranks also run failed on rank 0, leaving them out of step: {}", e.what()),
                   1);
  }

 private:
  Cluster& cluster_;
  std::vector<const Model*> models_;
  std::recursive_mutex mutex_;
};

std::shared_ptr<MirroredSessions> mirror_sessions(Cluster& cluster, std::vector<const Model*> models) {
  if (cluster.ranks() == 1) return nullptr;
  return std::make_shared<MirroredSessions>(cluster, std::move(models));
}

void follow_sessions(Cluster& cluster, const std::vector<const Model*>& models) {
  cluster.watch_ranks();
  SessionReplica replica(models);
  for (;;) {
    std::string bytes;
    cluster.broadcast(bytes);
    try {
      DecodedSessionOp d;
      decode_session_op(bytes, d);
      if (d.op.kind == SessionOp::Stop) {
        cluster.unwatch();
        cluster.gather("");  // rank 0's side of the watch closes only after this
        return;
      }
      replica.apply(d.op);
    } catch (const std::exception& e) {
      // Rank 0 did this operation; a follower that cannot is no longer a copy of it.
      cluster.abort(fmt::format("could not follow rank 0: {}", e.what()), 1);
    }
  }
}

}  // namespace sluice
