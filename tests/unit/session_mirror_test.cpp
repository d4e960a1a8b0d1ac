// The seam serve and chat use under mpirun (runtime/session_mirror.h): every
// operation on a mirrored session's state reaches the mirror, in its wire
// form, before it is done, and a SessionReplica that applies them holds the
// same state, bit for bit. Here the "other rank" is a replica in this process,
// fed through encode/decode, driven the way the server drives sessions: the
// prompt cache (slots, checkpoints, cuts, restores; a recurrent model whose
// rollbacks feed again), a prefill cancelled between chunks, batched decoding
// and speculative verification.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/engine.h"
#include "runtime/prompt_cache.h"
#include "runtime/session.h"
#include "runtime/session_mirror.h"
#include "support/test_support.h"
#include "util/cancelled.h"

namespace sluice::session_mirror_test {
namespace {

class LoopbackMirror : public SessionMirror {
 public:
  explicit LoopbackMirror(const Model& model) : model_(model), replica_({&model}) { set_session_mirror(this); }
  ~LoopbackMirror() override { set_session_mirror(nullptr); }
  std::unique_lock<std::recursive_mutex> hold() override { return std::unique_lock(mutex_); }
  int32_t model_index(const Model& m) const override { return &m == &model_ ? 0 : -1; }
  void failed(const std::exception& e) override { ADD_FAILURE() << "a sent pass failed: " << e.what(); }
  void send(const SessionOp& op) override {
    ++sent[op.kind];
    DecodedSessionOp d;
    decode_session_op(encode_session_op(op), d);
    EXPECT_TRUE(replica_.apply(d.op));
  }
  SessionReplica& replica() { return replica_; }
  std::map<int, int> sent;  // operations by kind

 private:
  const Model& model_;
  SessionReplica replica_;
  std::recursive_mutex mutex_;
};

std::vector<int32_t> seq(int n, int salt, int64_t vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t((uint64_t(i) * 37 + uint64_t(salt) * 911 + 3) % uint64_t(vocab)));
  return t;
}

// The replica's copy of `s` holds the same tokens and state, bit for bit.
void expect_mirrored(LoopbackMirror& m, const Session& s) {
  const Session* copy = m.replica().find(s.id());
  ASSERT_NE(copy, nullptr) << "session " << s.id() << " not mirrored";
  const SessionImage a = s.image(), b = copy->image();
  ASSERT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    ASSERT_EQ(a.layers[l].size(), b.layers[l].size()) << "layer " << l;
    for (size_t t = 0; t < a.layers[l].size(); ++t) {
      const auto &x = a.layers[l][t].values, &y = b.layers[l][t].values;
      ASSERT_EQ(x.size(), y.size()) << "layer " << l;
      EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << "layer " << l << " tensor " << t;
    }
  }
}

class SessionMirrorTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { model = load_model(test::fixture(std::string("golden/") + GetParam())); }
  std::unique_ptr<Engine> model;
  int64_t V() const { return model->info().vocab; }
};

TEST_P(SessionMirrorTest, PromptCacheConversationsAreMirrored) {
  LoopbackMirror m(*model);
  {
    PromptCacheOptions o;
    o.slots = 2;
    PromptCache cache(*model, o);
    const auto sys = seq(20, 1, V());
    std::vector<int32_t> convo = sys;
    for (int turn = 0; turn < 4; ++turn) {
      // Turns 0, 1, 3 continue one conversation; turn 2 departs from it after the system prompt.
      std::vector<int32_t> prompt = turn == 2 ? sys : convo;
      const auto more = seq(6 + turn, 10 + turn, V());
      prompt.insert(prompt.end(), more.begin(), more.end());
      CachedConversation c = cache.take(prompt, {int64_t(sys.size())});
      Session& s = *c.session;
      for (int64_t p : cache.save_points()) {
        s.feed(std::vector<int32_t>(prompt.begin() + int64_t(s.tokens().size()), prompt.begin() + p));
        cache.save(s);
      }
      s.feed(std::vector<int32_t>(prompt.begin() + int64_t(s.tokens().size()), prompt.end() - 1));
      s.checkpoint(false);
      c.mark = int64_t(prompt.size()) - 1;
      s.feed({prompt.back()});
      const auto reply = seq(3, 20 + turn, V());
      s.feed(reply);
      expect_mirrored(m, s);
      if (turn != 2) {
        convo = prompt;
        convo.insert(convo.end(), reply.begin(), reply.end());
      }
      cache.keep(std::move(c));
    }
    EXPECT_GT(m.sent[SessionOp::Checkpoint], 0);
    EXPECT_GT(m.sent[SessionOp::Commit] + m.sent[SessionOp::Rollback] + m.sent[SessionOp::Cut] +
                  m.sent[SessionOp::Restore],
              0)
        << "no prefix was reused";
  }
  EXPECT_EQ(m.replica().sessions(), 0u) << "sessions dropped on rank 0 live on in the replica";
}

TEST_P(SessionMirrorTest, CancelledPrefillBatchesAndSpeculation) {
  LoopbackMirror m(*model);
  Session a(*model), b(*model);
  a.set_prefill_chunk(4);
  a.set_prefill_span(0);  // chunk by chunk: a piece per chunk
  // Cancelled before its third chunk: both hold the two chunks fed.
  int polls = 0;
  EXPECT_THROW(a.feed(seq(16, 2, V()), [&] { return ++polls > 2; }), Cancelled);
  EXPECT_EQ(a.tokens().size(), 8u);
  expect_mirrored(m, a);
  b.feed(seq(5, 3, V()));
  // Decoded together.
  std::vector<Session*> both{&a, &b};
  std::vector<std::vector<int32_t>> next{{7}, {9}};
  Session::feed_together(both, next);
  expect_mirrored(m, a);
  expect_mirrored(m, b);
  // Verification as speculative decoding does it: mark, all logits, keep part.
  b.checkpoint();
  b.feed_all(seq(4, 5, V()));
  b.rollback(2);
  expect_mirrored(m, b);
  // A refused feed (beyond the context) is not sent, and changes neither.
  const int64_t ctx = model->info().max_positions;
  if (ctx > 0 && ctx < 100000) {
    const int feeds = m.sent[SessionOp::Feed];
    EXPECT_ANY_THROW(a.feed(seq(int(ctx), 6, V())));
    EXPECT_EQ(m.sent[SessionOp::Feed], feeds);
    expect_mirrored(m, a);
  }
}

// A long feed goes in spans, layer by layer (Model::forward_span): the replica
// feeds each span as one too, and a rollback that feeds again does it alike.
TEST_P(SessionMirrorTest, SpansAreFedAsSpans) {
  LoopbackMirror m(*model);
  Session s(*model);
  s.set_prefill_chunk(4);
  s.set_prefill_span(12);
  s.feed(seq(30, 7, V()));  // spans of 12, 12 and 6 tokens
  EXPECT_EQ(m.sent[SessionOp::Feed], 3);
  expect_mirrored(m, s);
  s.checkpoint(false);  // no records: keeping part feeds it again
  s.feed(seq(20, 8, V()));
  s.rollback(15);
  expect_mirrored(m, s);
}

INSTANTIATE_TEST_SUITE_P(Models, SessionMirrorTest, ::testing::Values("qwen3_moe_tiny", "kimi_linear_tiny"));

TEST(SessionOpWire, RoundTripsAndRefusesGarbage) {
  SessionOp op;
  op.kind = SessionOp::FeedTogether;
  op.ids = {3, 9};
  op.tokens = {{1, 2, 3}, {4}};
  op.chunk = 5;
  DecodedSessionOp d;
  decode_session_op(encode_session_op(op), d);
  EXPECT_EQ(d.op.kind, SessionOp::FeedTogether);
  EXPECT_EQ(d.op.ids, op.ids);
  EXPECT_EQ(d.op.tokens, op.tokens);
  EXPECT_EQ(d.op.chunk, 5);
  std::string bytes = encode_session_op(op);
  DecodedSessionOp bad;
  EXPECT_ANY_THROW(decode_session_op(bytes.substr(0, bytes.size() - 1), bad));
  EXPECT_ANY_THROW(decode_session_op(bytes + "x", bad));
  bytes[0] = char(200);
  EXPECT_ANY_THROW(decode_session_op(bytes, bad));
}

}  // namespace
}  // namespace sluice::session_mirror_test
