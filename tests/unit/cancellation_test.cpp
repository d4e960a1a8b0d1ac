// Cancellation inside long work: a stop check polled before each prefill chunk
// and between the layers of each pass (State::stop, Session::feed). A stop
// throws Cancelled and leaves the session holding exactly the chunks fed
// before, so continuing from there gives the uninterrupted logits bit for bit;
// a check that never fires changes no bit. The pacer sizes chunks by time.
#include <gtest/gtest.h>

#include <cstring>

#include "chat/prefill_pacer.h"
#include "engine/engine.h"
#include "runtime/session.h"
#include "support/test_support.h"
#include "util/cancelled.h"
#include "util/error.h"

namespace sluice::cancellation_test {
namespace {

using test::same_bits;
using test::spread_prompt;

// Kimi K3's tiny fixture has both kinds of state: KDA layers (recurrent, restored
// from a copy) and MLA layers (latent caches, cut back to the mark).
TEST(Cancellation, StopBetweenLayersKeepsTheChunksBeforeAndChangesNoBits) {
  auto m = load_model(test::fixture("golden/kimi_k3_tiny"));
  const int64_t layers = m->info().n_layers, chunk = 64;
  ASSERT_GE(layers, 3);
  const std::vector<int32_t> prompt = spread_prompt(300, m->info().vocab);

  // Chunk by chunk (no spans): the test is about what a stop keeps of the chunks (PrefillSpan's tests do spans).
  Session whole(*m);
  whole.set_prefill_chunk(chunk);
  whole.set_prefill_span(0);
  const std::vector<float> expected = whole.feed(prompt);

  Session quiet(*m);  // a check that never fires
  quiet.set_prefill_chunk(chunk);
  quiet.set_prefill_span(0);
  int64_t polls = 0;
  EXPECT_TRUE(same_bits(quiet.feed(prompt, [&] { return ++polls, false; }), expected));
  const int64_t chunks = (int64_t(prompt.size()) + chunk - 1) / chunk;
  EXPECT_EQ(polls, chunks * (1 + layers)) << "one poll before each chunk and one before each layer of its pass";

  // Stopped before the third chunk, and before its second layer: two chunks stay, nothing of the third.
  for (const int64_t fire_at : {2 * (1 + layers) + 1 + 2, 2 * (1 + layers) + 1}) {
    Session s(*m);
    s.set_prefill_chunk(chunk);
    s.set_prefill_span(0);
    int64_t n = 0;
    EXPECT_THROW(s.feed(prompt, [&] { return ++n == fire_at; }), Cancelled);
    EXPECT_EQ(n, fire_at);
    ASSERT_EQ(s.position(), 2 * chunk);
    ASSERT_EQ(s.tokens(), std::vector<int32_t>(prompt.begin(), prompt.begin() + 2 * chunk));
    const std::vector<float> rest =
        s.feed(std::vector<int32_t>(prompt.begin() + 2 * chunk, prompt.end()));
    EXPECT_TRUE(same_bits(rest, expected)) << "continuing after a stop at poll " << fire_at << " changed the logits";
  }

  // Stopped inside an open mark (the server keeps one over a reply): the mark still rolls back exactly.
  Session marked(*m);
  marked.set_prefill_chunk(chunk);
  marked.set_prefill_span(0);
  marked.feed(std::vector<int32_t>(prompt.begin(), prompt.begin() + 100));
  marked.checkpoint(true);
  int64_t n = 0;
  EXPECT_THROW(marked.feed(std::vector<int32_t>(prompt.begin() + 100, prompt.end()), [&] { return ++n == 4; }),
               Cancelled);
  EXPECT_EQ(marked.position(), 100);
  marked.rollback(0);
  EXPECT_TRUE(same_bits(marked.feed(std::vector<int32_t>(prompt.begin() + 100, prompt.end())), expected));
}

TEST(Cancellation, PacerSizesChunksFromTheMeasuredRate) {
  chat::PrefillPacer off(5000, 0);
  EXPECT_EQ(off.next(), 5000);
  off.done(5000, 100.0);
  EXPECT_EQ(off.next(), 5000) << "without a target every chunk is the plan's";

  chat::PrefillPacer p(5000, 0.5);
  EXPECT_EQ(p.next(), chat::PrefillPacer::kFirstTokens);
  p.done(64, 0.01);  // fast: grows, at most fourfold
  EXPECT_EQ(p.next(), 256);
  p.done(256, 0.256);  // 1 ms a token: 500 fit in the target
  EXPECT_EQ(p.next(), 500);
  p.done(500, 5.0);  // slower further in: 50 fit
  EXPECT_EQ(p.next(), 50);
  p.done(50, 100.0);  // never below the floor
  EXPECT_EQ(p.next(), chat::PrefillPacer::kMinTokens);
  for (int i = 0; i < 10; ++i) p.done(p.next(), 1e-6);
  EXPECT_EQ(p.next(), 5000) << "never above the plan's chunk";
  chat::PrefillPacer tiny(8, 0.5);
  EXPECT_EQ(tiny.next(), 8);
  tiny.done(8, 100.0);
  EXPECT_EQ(tiny.next(), 8);
}

}  // namespace
}  // namespace sluice::cancellation_test
