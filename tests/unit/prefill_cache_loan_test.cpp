// A long prompt on a small budget (engine/prefill_room.h): a span borrows the expert
// cache's slots beyond one layer's experts, so a Kimi-K3-shaped model whose spans the
// reserve alone cuts short prefills the prompt in one span, reading each routed expert
// once per layer instead of once per span, with the same bits, within the plan's cache
// and room by the engine's own accounting; afterwards the cache has all its slots again.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "engine/engine.h"
#include "runtime/session.h"
#include "store/synthetic.h"
#include "support/request_log.h"
#include "support/test_support.h"

namespace sluice::prefill_cache_loan_test {
namespace {

using test::RequestLog;
using test::same_bits;
using test::spread_prompt;

// A small K3-shaped model (Block AttnRes, latent MoE) whose routed experts outgrow the
// cache of a 40 MiB budget (reserve 8 MiB).
struct SmallK3 {
  test::TempDir tmp;
  std::string dir = tmp.file("k3");
  SmallK3() {
    SynthOptions o;
    o.arch = "kimi_k3";
    o.layers = 6;
    o.experts = 64;
    o.moe_intermediate = 512;
    o.progress = false;
    o.out_dir = dir;
    synthesize(o);
  }
};

MemoryRequest small_budget() {
  MemoryRequest r;
  r.ram_gib = 40.0 / 1024;
  r.no_prefetch = true;  // reads are what the routing asked for, nothing guessed
  r.no_prefault = true;
  return r;
}

// The span the reserve alone allows (no slot borrowed).
int64_t reserve_only_span(const Engine& m) {
  PrefillRoom alone = m.prefill_room();
  alone.slot_bytes = 0;
  alone.slots = 0;
  return prefill_passes(alone).span;
}

// The long prompt of these tests: four spans of the reserve alone.
int64_t long_prompt_tokens(const Engine& m) {
  const int64_t own = reserve_only_span(m);
  return 3 * own + own / 2;
}

// The span borrows slots while its reader threads fill them, within the budget, and gives them
// back: the lending alone, on a span and a half of the reserve (the ThreadSanitizer tree runs this
// one, where every token costs ~20x; the tests below prefill the long prompt three times to compare
// bits with spans of the reserve alone and chunk by chunk).
TEST(PrefillCacheLoan, ASpanBorrowsSlotsReadsEachExpertOnceAndGivesThemBack) {
  const SmallK3 k3;
  auto m = Engine::open(k3.dir, small_budget());
  const PrefillRoom room = m->prefill_room();
  const StreamingExperts* cache = m->streaming_experts();
  ASSERT_NE(cache, nullptr);
  ASSERT_LT(cache->slots(), room.experts) << "the cache must not hold every expert";
  ASSERT_GT(lendable_slots(room), 0) << "the cache must hold more than one layer's experts";
  // A span and a half of the reserve alone: enough to need borrowed slots.
  const int64_t own = reserve_only_span(*m);
  const int64_t n = own + own / 2;
  ASSERT_GE(m->prefill_span(), long_prompt_tokens(*m)) << "borrowing must make the span several times longer";
  RequestLog log(*m);
  Session s = m->session();
  const std::vector<float> logits = s.feed(spread_prompt(n, m->info().vocab));
  log.expect_one_request_per_layer(*m);
  EXPECT_EQ(m->expert_stats().reads_submitted, log.routed.size()) << "one read per routed (layer, expert)";
  EXPECT_EQ(m->expert_stats().duplicate_loads, 0u);
  const Engine::SpanMemory used = m->span_memory();
  EXPECT_EQ(used.spans, 1);
  EXPECT_EQ(used.longest, n);
  EXPECT_GT(used.lent_bytes, 0u);
  EXPECT_LE(used.lent_bytes, uint64_t(lendable_slots(room)) * room.slot_bytes);
  // Never beyond the budget: while the span ran, the cache's slots in use, its rows and a
  // chunk's activations stayed within the plan's expert cache and room, and those with the
  // spine, the state and the rest of the reserve within --ram.
  const MemoryPlan& plan = m->plan();
  EXPECT_LE(used.peak_bytes, plan.expert_cache + room.room);
  const uint64_t spine = plan.stream_spine ? plan.spine_budget : plan.spine - plan.spine_on_demand;
  EXPECT_LE(plan.expert_cache + plan.reserve + plan.state + spine, plan.budget);
  EXPECT_EQ(cache->lent_slots(), 0) << "the slots are given back when the span ends";
  for (const float v : logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(PrefillCacheLoan, OneSpanGivesTheBitsOfSpansOfTheReserveAloneAndOfChunks) {
  const SmallK3 k3;
  const MemoryRequest r = small_budget();
  auto m = Engine::open(k3.dir, r);
  const int64_t own = reserve_only_span(*m);
  ASSERT_GT(own, m->prefill_chunk());
  const std::vector<int32_t> prompt = spread_prompt(long_prompt_tokens(*m), m->info().vocab);
  Session s = m->session();
  ASSERT_EQ(s.prefill_piece(), m->prefill_span());
  const std::vector<float> logits = s.feed(prompt);
  ASSERT_EQ(m->span_memory().spans, 1);
  EXPECT_EQ(m->span_memory().longest, int64_t(prompt.size()));
  const uint64_t reads = m->expert_stats().reads_submitted;

  // The reserve alone: spans of `own` tokens, each MoE layer asked once per span and the
  // experts read again each time; the same bits, as chunk by chunk.
  auto old = Engine::open(k3.dir, r);
  RequestLog old_log(*old);
  Session o = old->session();
  o.set_prefill_span(own);
  EXPECT_TRUE(same_bits(o.feed(prompt), logits));
  old->set_request_observer({});
  ASSERT_FALSE(old_log.requests.empty());
  for (const auto& [layer, k] : old_log.requests) EXPECT_EQ(k, 4) << "layer " << layer;
  EXPECT_EQ(old->span_memory().spans, 4);
  EXPECT_EQ(old->span_memory().lent_bytes, 0u);
  EXPECT_GT(old->expert_stats().reads_submitted, 2 * reads);
  auto chunks = Engine::open(k3.dir, r);
  Session c = chunks->session();
  c.set_prefill_span(0);
  EXPECT_TRUE(same_bits(c.feed(prompt), logits));
}

// Decodes `tokens` one at a time after a mark, goes back to the mark and decodes them
// again: the cache misses of the second time, and the last logits.
struct Replay {
  uint64_t misses_again = 0;
  std::vector<float> logits;
};
Replay decode_twice(const Engine& m, Session& s, const std::vector<int32_t>& tokens) {
  s.checkpoint(false);
  for (const int32_t t : tokens) s.feed({t});
  s.rollback(0);
  const uint64_t misses = m.expert_stats().misses;
  Replay r;
  for (const int32_t t : tokens) r.logits = s.feed({t});
  r.misses_again = m.expert_stats().misses - misses;
  return r;
}

TEST(PrefillCacheLoan, TheCacheHasItsSlotsBackForTheDecode) {
  const SmallK3 k3;
  const MemoryRequest r = small_budget();
  auto m = Engine::open(k3.dir, r);
  const int64_t own = reserve_only_span(*m);
  const std::vector<int32_t> prompt = spread_prompt(long_prompt_tokens(*m), m->info().vocab);
  Session s = m->session();
  s.feed(prompt);
  const StreamingExperts& cache = *m->streaming_experts();
  const int64_t lent = int64_t(m->span_memory().lent_bytes / cache.slot_bytes());
  ASSERT_GT(lent, 0);
  EXPECT_EQ(cache.lent_slots(), 0);
  // Decoded tokens until their experts need more slots than the cache kept while it lent.
  const int64_t kept = cache.slots() - lent;
  std::vector<int32_t> tokens;
  {
    RequestLog log(*m);
    s.checkpoint(false);
    for (int32_t t = 5; t < m->info().vocab && int64_t(log.routed.size()) <= kept; t += 7) {
      s.feed({t});
      tokens.push_back(t);
    }
    m->set_request_observer({});
    s.rollback(0);
    ASSERT_GT(int64_t(log.routed.size()), kept);
    ASSERT_LE(int64_t(log.routed.size()), cache.slots()) << "the decode's experts must fit in the whole cache";
  }
  const Replay after_loan = decode_twice(*m, s, tokens);
  EXPECT_EQ(after_loan.misses_again, 0u) << "every expert of the decode stays cached: all the slots are back";
  // As after spans of the reserve alone (nothing lent): the same hits and the same bits.
  auto old = Engine::open(k3.dir, r);
  Session o = old->session();
  o.set_prefill_span(own);
  o.feed(prompt);
  ASSERT_EQ(old->span_memory().lent_bytes, 0u);
  const Replay plain = decode_twice(*old, o, tokens);
  EXPECT_EQ(plain.misses_again, 0u);
  EXPECT_TRUE(same_bits(after_loan.logits, plain.logits));
}

}  // namespace
}  // namespace sluice::prefill_cache_loan_test
