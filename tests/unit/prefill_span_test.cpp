// Long prompts layer by layer (Model::forward_span, Session spans): every layer
// over the whole span before the next, attention chunk by chunk, a MoE layer's
// experts in batches of a chunk's rows. The logits and the state are bit for
// bit those of chunk-by-chunk passes on every architecture, each routed expert
// is read once per layer per span where chunks read it once per chunk, a stop
// between chunks leaves the pieces fed before, and the engine sizes spans from
// its reserve (the reads: PrefillChunk.TwoThousandTokensReadEachRoutedExpertAtMostOncePerLayer).
#include <gtest/gtest.h>

#include <cstring>

#include "engine/engine.h"
#include "runtime/session.h"
#include "support/test_support.h"
#include "util/cancelled.h"

namespace sluice::prefill_span_test {
namespace {

using test::same_bits;
using test::spread_prompt;

class PrefillSpanModels : public ::testing::TestWithParam<const char*> {};

// 300 tokens (fewer where the context is shorter) in five chunks against one span of them with
// the same chunk, then spans that end mid-prompt, then three decoded tokens each: every logit
// bit for bit.
TEST_P(PrefillSpanModels, LayerByLayerGivesTheChunksBits) {
  auto m = load_model(test::fixture(std::string("golden/") + GetParam()));
  const int64_t ctx = m->info().max_positions > 0 ? m->info().max_positions : 1 << 20;
  const int64_t n = std::min<int64_t>(300, ctx - 4), chunk = (n + 4) / 5;
  const std::vector<int32_t> prompt = spread_prompt(n, m->info().vocab);
  Session chunks(*m), span(*m), spans(*m);
  for (Session* s : {&chunks, &span, &spans}) s->set_prefill_chunk(chunk);
  chunks.set_prefill_span(0);
  span.set_prefill_span(1000);
  spans.set_prefill_span(2 * chunk + 2);  // spans of three chunks, the last chunk of each short
  ASSERT_EQ(span.prefill_piece(), 1000);
  const std::vector<float> expected = chunks.feed(prompt);
  EXPECT_TRUE(same_bits(span.feed(prompt), expected)) << "one span";
  EXPECT_TRUE(same_bits(spans.feed(prompt), expected)) << "spans of three chunks";
  for (int i = 0; i < 3; ++i) {
    const int32_t next = argmax(expected.data(), m->info().vocab) + i;
    const std::vector<float> want = chunks.feed({next});
    EXPECT_TRUE(same_bits(span.feed({next}), want)) << "decoded token " << i << " after one span";
    EXPECT_TRUE(same_bits(spans.feed({next}), want)) << "decoded token " << i << " after spans";
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, PrefillSpanModels,
                         ::testing::Values("deepseek_v3_tiny", "deepseek_v3_tiny_fp8", "deepseek_v3_tiny_int4",
                                           "qwen3_moe_tiny", "gpt_oss_tiny", "gpt_oss_clamp", "kimi_linear_tiny",
                                           "kimi_k3_tiny", "kimi_k3_situ"));

// A stop between the chunks of a span (State::stop is polled before each layer and each
// chunk of it) leaves the spans fed before, and continuing gives the same bits.
TEST(PrefillSpan, StopInsideASpanKeepsTheSpansBefore) {
  auto m = load_model(test::fixture("golden/kimi_k3_tiny"));
  const int64_t layers = m->info().n_layers;
  const std::vector<int32_t> prompt = spread_prompt(300, m->info().vocab);
  Session whole(*m);
  whole.set_prefill_chunk(64);
  whole.set_prefill_span(0);
  const std::vector<float> expected = whole.feed(prompt);

  Session quiet(*m);
  quiet.set_prefill_chunk(64);
  quiet.set_prefill_span(150);  // spans of 150 (three chunks: 64, 64, 22)
  int64_t polls = 0;
  EXPECT_TRUE(same_bits(quiet.feed(prompt, [&] { return ++polls, false; }), expected));
  EXPECT_EQ(polls, 2 * (1 + layers * 3)) << "per span: one poll before it, then before each layer's chunks";

  Session s(*m);
  s.set_prefill_chunk(64);
  s.set_prefill_span(150);
  int64_t n = 0;
  const int64_t fire_at = (1 + layers * 3) + 1 + 3 * 2 + 2;  // second span, third layer, its second chunk
  EXPECT_THROW(s.feed(prompt, [&] { return ++n == fire_at; }), Cancelled);
  ASSERT_EQ(s.position(), 150);
  EXPECT_TRUE(same_bits(s.feed(std::vector<int32_t>(prompt.begin() + 150, prompt.end())), expected));
}

// Spans come from the reserve: a chunk's activations take a quarter of the room (three quarters
// of the reserve), the span's lasting rows the rest; a span is used only when it is longer than
// the chunk that would take the whole room.
TEST(PrefillSpan, SizedFromTheReserve) {
  MemoryRequest r;
  r.ram_gib = 0.5;
  auto m = Engine::open(test::fixture("golden/kimi_k3_tiny"), r);
  const uint64_t room = m->plan().reserve / 4 * 3, act = m->activation_bytes_per_token();
  const uint64_t span_bytes = m->span_bytes_per_token();
  ASSERT_GT(span_bytes, 0u);
  EXPECT_LT(span_bytes, act) << "a span's lasting rows are less than a chunk's activations";
  const int64_t chunk = int64_t(room / 4 / act);
  EXPECT_EQ(m->prefill_chunk(), chunk);
  EXPECT_EQ(m->prefill_span(), int64_t((room - uint64_t(chunk) * act) / span_bytes));
  EXPECT_GT(m->prefill_span(), int64_t(room / act));
  Session s = m->session();
  EXPECT_EQ(s.prefill_piece(), m->prefill_span());
}

}  // namespace
}  // namespace sluice::prefill_span_test
