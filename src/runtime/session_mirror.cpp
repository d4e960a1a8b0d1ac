#include "runtime/session_mirror.h"

#include <cstring>

#include "runtime/session.h"
#include "runtime/state_file.h"
#include "util/error.h"

namespace sluice {

namespace {

void put(std::string& out, const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
template <class T>
void put(std::string& out, T v) {
  put(out, &v, sizeof(v));
}

struct Reader {
  const std::string& in;
  size_t at = 0;
  void get(void* p, size_t n) {
    if (n > in.size() - at) fail("internal: a session operation from rank 0 is cut short ({} bytes)", in.size());
    std::memcpy(p, in.data() + at, n);
    at += n;
  }
  template <class T>
  T get() {
    T v{};
    get(&v, sizeof(v));
    return v;
  }
};

}  // namespace

std::string encode_session_op(const SessionOp& op) {
  std::string out;
  put(out, uint8_t(op.kind));
  put(out, uint64_t(op.ids.size()));
  put(out, op.ids.data(), op.ids.size() * sizeof(uint64_t));
  put(out, op.value);
  put(out, op.chunk);
  put(out, op.span);
  put(out, uint64_t(op.tokens.size()));
  for (const auto& t : op.tokens) {
    put(out, uint64_t(t.size()));
    put(out, t.data(), t.size() * sizeof(int32_t));
  }
  if (op.kind == SessionOp::Restore) {
    if (!op.image) fail("internal: a restore without its image");
    const std::vector<uint8_t> image = encode_state(*op.image, "");
    put(out, image.data(), image.size());
  }
  return out;
}

void decode_session_op(const std::string& bytes, DecodedSessionOp& d) {
  Reader r{bytes};
  SessionOp& op = d.op;
  const uint8_t kind = r.get<uint8_t>();
  if (kind > SessionOp::Stop) fail("internal: unknown session operation {} from rank 0", kind);
  op.kind = SessionOp::Kind(kind);
  op.ids.resize(size_t(r.get<uint64_t>()));
  r.get(op.ids.data(), op.ids.size() * sizeof(uint64_t));
  op.value = r.get<int64_t>();
  op.chunk = r.get<int64_t>();
  op.span = r.get<int64_t>();
  op.tokens.resize(size_t(r.get<uint64_t>()));
  for (auto& t : op.tokens) {
    t.resize(size_t(r.get<uint64_t>()));
    r.get(t.data(), t.size() * sizeof(int32_t));
  }
  if (op.kind == SessionOp::Restore) {
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data()) + r.at;
    d.image = decode_state({p, bytes.size() - r.at}, "the state sent by rank 0").image;
    op.image = &d.image;
  }
  if (r.at != bytes.size() && op.kind != SessionOp::Restore)
    fail("internal: {} bytes left over after a session operation from rank 0", bytes.size() - r.at);
}


SessionReplica::SessionReplica(std::vector<const Model*> models) : models_(std::move(models)) {}
SessionReplica::~SessionReplica() = default;

const Session* SessionReplica::find(uint64_t id) const {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second.get();
}

Session& SessionReplica::session(uint64_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) fail("internal: rank 0 names session {}, which this rank does not have", id);
  return *it->second;
}

bool SessionReplica::apply(const SessionOp& op) {
  if (op.kind != SessionOp::Stop && op.kind != SessionOp::FeedTogether && op.ids.size() != 1)
    fail("internal: a session operation for {} sessions", op.ids.size());
  switch (op.kind) {
    case SessionOp::Stop:
      return false;
    case SessionOp::Open:
      if (op.value < 0 || size_t(op.value) >= models_.size()) fail("internal: rank 0 names model {}", op.value);
      sessions_[op.ids[0]] = std::make_unique<Session>(*models_[size_t(op.value)], Session::NotMirrored{});
      break;
    case SessionOp::Close:
      sessions_.erase(op.ids[0]);
      break;
    case SessionOp::Feed:
    case SessionOp::FeedAll: {
      if (op.tokens.size() != 1) fail("internal: a feed of {} token lists", op.tokens.size());
      Session& s = session(op.ids[0]);
      s.set_prefill_chunk(op.chunk);
      // Feed: one piece, as rank 0 fed it (a span when longer than a chunk).
      if (op.kind == SessionOp::Feed) s.set_prefill_span(op.value);
      if (op.kind == SessionOp::Feed) s.feed(op.tokens[0]);
      else s.feed_all(op.tokens[0]);
      break;
    }
    case SessionOp::FeedTogether: {
      std::vector<Session*> batch;
      for (uint64_t id : op.ids) batch.push_back(&session(id));
      Session::feed_together(batch, op.tokens);
      break;
    }
    case SessionOp::Checkpoint:
      session(op.ids[0]).checkpoint(op.value != 0);
      break;
    case SessionOp::Rollback: {
      Session& s = session(op.ids[0]);
      s.set_prefill_chunk(op.chunk);
      s.set_prefill_span(op.span);
      s.rollback(op.value);
      break;
    }
    case SessionOp::Commit:
      session(op.ids[0]).commit();
      break;
    case SessionOp::Restore:
      if (!op.image) fail("internal: a restore without its image");
      session(op.ids[0]).restore(*op.image, op.value);
      break;
    case SessionOp::Cut:
      session(op.ids[0]).cut(op.value);
      break;
  }
  return true;
}

}  // namespace sluice
