// Whole-prompt prefill: the default chunk is as long as the memory plan's
// activation reserve allows (thousands of tokens on the test models, not 64),
// a 2,000-token prompt in one chunk reads each routed expert at most once per
// layer, and its logits are bit for bit those of 64-token chunks.
#include <gtest/gtest.h>

#include <set>

#include "engine/engine.h"
#include "runtime/session.h"
#include "support/request_log.h"
#include "support/test_support.h"

namespace sluice::prefill_chunk_test {
namespace {

using test::RequestLog;
using test::spread_prompt;

TEST(PrefillChunk, FollowsTheActivationReserve) {
  auto m = load_model(test::fixture("golden/kimi_k3_tiny"));
  const uint64_t per_token = m->activation_bytes_per_token();
  // At least the residual stream, the Block AttnRes snapshots and one MoE layer's expert outputs.
  EXPECT_GT(per_token, uint64_t(4 * 256 + 4 * 128) * sizeof(float));
  // Long prompts go in spans layer by layer (PrefillSpan's tests): a chunk then takes a quarter
  // of the room, three quarters of the reserve.
  ASSERT_GT(m->prefill_span(), 0);
  EXPECT_EQ(m->prefill_chunk(), int64_t((768ull << 20) / 4 * 3 / 4 / per_token));
  EXPECT_GE(m->prefill_chunk(), 500);
  EXPECT_GE(m->prefill_span(), 2000);
  EXPECT_EQ(m->session().prefill_chunk(), m->prefill_chunk());
  // Under a budget the chunk follows its reserve: a smaller budget, a shorter chunk.
  MemoryRequest small, large;
  small.ram_gib = 0.05;
  large.ram_gib = 0.5;
  auto a = Engine::open(test::fixture("golden/kimi_k3_tiny"), small);
  auto b = Engine::open(test::fixture("golden/kimi_k3_tiny"), large);
  EXPECT_EQ(a->prefill_chunk(), int64_t(a->plan().reserve / 4 * 3 / 4 / per_token));
  EXPECT_LT(a->prefill_chunk(), b->prefill_chunk());
  EXPECT_LT(a->prefill_span(), b->prefill_span());
}

// The counter test: every MoE layer asks once for the distinct experts of the
// whole prompt, and the streaming source reads exactly those, each once,
// although the cache holds little more than one layer's experts.
TEST(PrefillChunk, TwoThousandTokensReadEachRoutedExpertAtMostOncePerLayer) {
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
  auto m = load_model(dir, o);
  const std::vector<int32_t> prompt = spread_prompt(2000, m->info().vocab);
  RequestLog log(*m);
  Session s = m->session();
  ASSERT_GE(s.prefill_chunk(), int64_t(prompt.size()));
  const std::vector<float> whole = s.feed(prompt);
  log.expect_one_request_per_layer(*m);
  const std::set<std::pair<int32_t, int32_t>>& routed = log.routed;
  const ExpertStats st = m->expert_stats();
  EXPECT_EQ(st.reads_submitted, routed.size());  // one read per routed (layer, expert), no more
  EXPECT_EQ(st.requests, routed.size());
  EXPECT_EQ(st.duplicate_loads, 0u);
  EXPECT_GT(st.evictions, 0u);
  uint64_t distinct = 0;
  for (const auto& [l, e] : routed) distinct += index.bytes(l, e);
  EXPECT_EQ(st.bytes_needed, distinct);
  EXPECT_GE(st.bytes_read, distinct);

  // The same prompt in 64-token chunks: the same logits, bit for bit, and
  // (here) many times the reads.
  auto m64 = load_model(dir, o);
  Session c(*m64);
  c.set_prefill_chunk(64);
  c.set_prefill_span(0);  // chunk by chunk (layer by layer would read each expert once: PrefillSpan)
  EXPECT_EQ(c.feed(prompt), whole);
  EXPECT_GT(m64->expert_stats().reads_submitted, 10 * st.reads_submitted);

  // The same 64-token chunks in one span, layer by layer (Model::forward_span): the same logits,
  // and again one request per MoE layer and one read per routed expert.
  auto ms = load_model(dir, o);
  RequestLog span_log(*ms);
  Session layered(*ms);
  layered.set_prefill_chunk(64);
  layered.set_prefill_span(4000);
  EXPECT_EQ(layered.feed(prompt), whole);
  span_log.expect_one_request_per_layer(*ms);
  EXPECT_EQ(ms->expert_stats().reads_submitted, span_log.routed.size());
  EXPECT_EQ(ms->expert_stats().duplicate_loads, 0u);
}

}  // namespace
}  // namespace sluice::prefill_chunk_test
