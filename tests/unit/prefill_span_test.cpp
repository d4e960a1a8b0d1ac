// Long prompts layer by layer (Model::forward_span, Session spans): every layer
// over the whole span before the next, attention chunk by chunk, a MoE layer's
// experts in batches of a chunk's rows. The logits and the state are bit for
// bit those of chunk-by-chunk passes on every architecture, each routed expert
// is read once per layer per span where chunks read it once per chunk, a stop
// between chunks leaves the pieces fed before, and the engine sizes spans from
// its reserve.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>

#include "engine/engine.h"
#include "runtime/session.h"
#include "support/test_support.h"
#include "util/cancelled.h"

namespace sluice {
namespace {

std::vector<int32_t> prompt_of(int64_t n, int64_t vocab) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(int32_t(3 + (i * 7919 + i / 13) % (vocab - 3)));
  return p;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class PrefillSpanModels : public ::testing::TestWithParam<const char*> {};

// 300 tokens (fewer where the context is shorter) in five chunks against one span of them with
// the same chunk, then spans that end mid-prompt, then three decoded tokens each: every logit
// bit for bit.
TEST_P(PrefillSpanModels, LayerByLayerGivesTheChunksBits) {
  auto m = load_model(test::fixture(std::string("golden/") + GetParam()));
  const int64_t ctx = m->info().max_positions > 0 ? m->info().max_positions : 1 << 20;
  const int64_t n = std::min<int64_t>(300, ctx - 4), chunk = (n + 4) / 5;
  const std::vector<int32_t> prompt = prompt_of(n, m->info().vocab);
  Session chunks(*m), span(*m), spans(*m);
  for (Session* s : {&chunks, &span, &spans}) s->set_prefill_chunk(chunk);
  chunks.set_prefill_span(0);
  span.set_prefill_span(1000);
  spans.set_prefill_span(2 * chunk + 2);  // spans of three chunks, the last chunk of each short
  ASSERT_EQ(span.prefill_piece(), 1000);
  const std::vector<float> expected = chunks.feed(prompt);
  EXPECT_TRUE(same_bits(span.feed(prompt), expected)) << "one span";
  EXPECT_TRUE(same_bits(spans.feed(prompt), expected)) << "spans of 130";
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

// The counter test: with a cache that holds little more than one layer's experts, a span asks
// each MoE layer once for its distinct experts and reads each once; chunks read them per chunk.
TEST(PrefillSpan, ReadsEachRoutedExpertOncePerLayer) {
  const std::string dir = test::fixture("golden/kimi_k3_tiny");
  auto resident = load_model(dir);
  const ExpertIndex& index = resident->expert_index();
  uint64_t largest_layer = 0, total = 0;
  for (int32_t l = 0; l < index.layers(); ++l) {
    uint64_t b = 0;
    for (int32_t e = 0; e < index.experts(l); ++e) b += index.bytes(l, e);
    largest_layer = std::max(largest_layer, b);
    total += b;
  }
  LoadOptions o;
  o.stream_experts = true;
  o.streaming.cache_bytes = largest_layer + largest_layer / 2;
  ASSERT_LT(o.streaming.cache_bytes, total / 2) << "the cache must not hold the whole pool";
  const std::vector<int32_t> prompt = prompt_of(2000, resident->info().vocab);

  auto m = load_model(dir, o);
  std::map<int32_t, int> requests;
  std::set<std::pair<int32_t, int32_t>> routed;
  bool repeated = false;
  m->set_request_observer([&](int32_t layer, const int32_t* x, int64_t n) {
    ++requests[layer];
    for (int64_t i = 0; i < n; ++i) repeated = !routed.insert({layer, x[i]}).second || repeated;
  });
  Session s(*m);
  s.set_prefill_chunk(64);
  s.set_prefill_span(4000);
  const std::vector<float> layered = s.feed(prompt);
  m->set_request_observer({});
  EXPECT_FALSE(repeated) << "an expert was requested twice for one layer";
  ASSERT_FALSE(requests.empty());
  for (const auto& [layer, n] : requests) EXPECT_EQ(n, 1) << "layer " << layer << " ran more than one MoE pass";
  const ExpertStats st = m->expert_stats();
  EXPECT_EQ(st.reads_submitted, routed.size());  // one read per routed (layer, expert)
  EXPECT_EQ(st.duplicate_loads, 0u);

  auto c = load_model(dir, o);
  Session chunks(*c);
  chunks.set_prefill_chunk(64);
  chunks.set_prefill_span(0);
  EXPECT_TRUE(same_bits(chunks.feed(prompt), layered));
  EXPECT_GT(c->expert_stats().reads_submitted, 10 * st.reads_submitted);
}

// A stop between the chunks of a span (State::stop is polled before each layer and each
// chunk of it) leaves the spans fed before, and continuing gives the same bits.
TEST(PrefillSpan, StopInsideASpanKeepsTheSpansBefore) {
  auto m = load_model(test::fixture("golden/kimi_k3_tiny"));
  const int64_t layers = m->info().n_layers;
  const std::vector<int32_t> prompt = prompt_of(300, m->info().vocab);
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
}  // namespace sluice
