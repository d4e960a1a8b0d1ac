// The one split of --ram: reserve, state, spine (resident or streamed) and
// expert cache, with the numbers pinned; the option checks name the option;
// the engine options carry the streaming knobs through.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::memory_plan_test {
namespace {

constexpr uint64_t MiB = 1ull << 20;

ModelFootprint footprint(uint64_t spine, uint64_t largest_expert = 50 * MiB) {
  ModelFootprint f;
  f.spine_bytes = spine;
  f.expert_bytes = 100 * kGiB;
  f.largest_expert_bytes = largest_expert;
  f.state_bytes_per_token = 1000;
  f.state_bytes_fixed = 24 * MiB;
  f.context_tokens = 4096;
  return f;
}

TEST(MemoryPlan, NoBudgetStreamsNothing) {
  const MemoryPlan p = plan_memory(0, footprint(4 * kGiB));
  EXPECT_FALSE(p.stream_experts);
  EXPECT_FALSE(p.stream_spine);
  EXPECT_EQ(p.expert_cache, 0u);
  EXPECT_EQ(p.state, 24 * MiB + 4096000);
  EXPECT_NE(p.describe().find("no --ram budget"), std::string::npos) << p.describe();
}

TEST(MemoryPlan, ResidentSpineLeavesTheRestToTheCache) {
  const MemoryPlan p = plan_memory(16 * kGiB, footprint(4 * kGiB));
  EXPECT_TRUE(p.stream_experts);
  EXPECT_FALSE(p.stream_spine);
  EXPECT_EQ(p.reserve, 16 * kGiB / 10);  // a tenth: between 768 MiB and 2 GiB
  EXPECT_EQ(p.state, 24 * MiB + 4096 * 1000);
  EXPECT_EQ(p.expert_cache, 16 * kGiB - 4 * kGiB - 16 * kGiB / 10 - (24 * MiB + 4096000));
  EXPECT_EQ(p.spine_budget, 0u);
  EXPECT_EQ(p.reserve + p.state + p.spine + p.expert_cache, p.budget);
  EXPECT_NE(p.describe().find("(resident)"), std::string::npos) << p.describe();
}

TEST(MemoryPlan, LargeSpineIsStreamedWithinThreeQuartersOfTheRest) {
  // 14 GiB of spine + working memory exceed three quarters of 16 GiB.
  const MemoryPlan p = plan_memory(16 * kGiB, footprint(14 * kGiB));
  EXPECT_TRUE(p.stream_spine);
  const uint64_t rest = 16 * kGiB - 16 * kGiB / 10 - (24 * MiB + 4096000);
  EXPECT_EQ(p.spine_budget, rest / 4 * 3);
  EXPECT_EQ(p.expert_cache, rest - rest / 4 * 3);
  EXPECT_EQ(p.reserve + p.state + p.spine_budget + p.expert_cache, p.budget);
  EXPECT_NE(p.describe().find("streamed layer by layer"), std::string::npos) << p.describe();
  const auto j = p.to_json();
  EXPECT_EQ(j["spine_budget_bytes"].get<uint64_t>(), p.spine_budget);
  EXPECT_EQ(j["expert_cache_bytes"].get<uint64_t>(), p.expert_cache);
  EXPECT_TRUE(j["stream_spine"].get<bool>());
}

// The embedding table is read on demand (a row per token, page cache): it does
// not count against the budget, so a spine that fits without it stays resident
// and the cache gets what it leaves.
TEST(MemoryPlan, OnDemandEmbeddingIsNotHeldInTheBudget) {
  ModelFootprint f = footprint(14 * kGiB);
  f.spine_on_demand_bytes = 6 * kGiB;
  const MemoryPlan p = plan_memory(16 * kGiB, f);
  EXPECT_FALSE(p.stream_spine);
  EXPECT_EQ(p.spine_on_demand, 6 * kGiB);
  EXPECT_EQ(p.expert_cache, 16 * kGiB - 8 * kGiB - 16 * kGiB / 10 - (24 * MiB + 4096000));
  EXPECT_EQ(p.reserve + p.state + p.spine - p.spine_on_demand + p.expert_cache, p.budget);
  EXPECT_NE(p.describe().find("8.00 GiB (resident)"), std::string::npos) << p.describe();
  EXPECT_NE(p.describe().find("read on demand"), std::string::npos) << p.describe();
  EXPECT_EQ(p.to_json()["spine_on_demand_bytes"].get<uint64_t>(), 6 * kGiB);
  f.spine_on_demand_bytes = 1 * kGiB;  // 13 GiB held: streamed
  EXPECT_TRUE(plan_memory(16 * kGiB, f).stream_spine);
}

TEST(MemoryPlan, SmallBudgetsReserveAFifth) {
  const MemoryPlan p = plan_memory(100 * MiB, footprint(10 * MiB, 1 * MiB));
  EXPECT_EQ(p.reserve, 20 * MiB);
  EXPECT_FALSE(p.stream_spine);  // 10 + 20 + 28 MiB <= 75 MiB
  EXPECT_EQ(p.expert_cache, 100 * MiB - 10 * MiB - 20 * MiB - (24 * MiB + 4096000));
}

// The reserve bounds the prefill chunk, so it grows with the budget (a tenth),
// but not below 768 MiB, not above 2 GiB, and never beyond a fifth.
TEST(MemoryPlan, ReserveGrowsWithTheBudgetWithinItsBounds) {
  EXPECT_EQ(plan_memory(2 * kGiB, footprint(10 * MiB, 1 * MiB)).reserve, 2 * kGiB / 5);
  EXPECT_EQ(plan_memory(6 * kGiB, footprint(10 * MiB, 1 * MiB)).reserve, 768 * MiB);
  EXPECT_EQ(plan_memory(10 * kGiB, footprint(10 * MiB, 1 * MiB)).reserve, kGiB);
  EXPECT_EQ(plan_memory(64 * kGiB, footprint(10 * MiB, 1 * MiB)).reserve, 2 * kGiB);
}

TEST(MemoryPlan, StreamedSpineGetsAtLeastWhatStreamingNeeds) {
  ModelFootprint f = footprint(14 * kGiB);
  f.spine_stream_min_bytes = 13 * kGiB;
  const MemoryPlan p = plan_memory(16 * kGiB, f);
  EXPECT_EQ(p.spine_budget, 13 * kGiB);
  EXPECT_EQ(p.expert_cache, 16 * kGiB - 16 * kGiB / 10 - (24 * MiB + 4096000) - 13 * kGiB);
  f.spine_stream_min_bytes = 15 * kGiB + 512 * MiB;
  EXPECT_THROW(plan_memory(16 * kGiB, f), Error);
}

TEST(MemoryPlan, ImpossibleBudgetsNameTheOption) {
  try {
    plan_memory(30 * MiB, footprint(1 * MiB, 1 * MiB));  // reserve 6 MiB + 28 MiB of state
    FAIL() << "accepted a budget smaller than the state";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--ram"), std::string::npos) << e.what();
  }
  try {
    plan_memory(1 * kGiB, footprint(10 * MiB, 900 * MiB));  // the cache cannot hold the largest expert
    FAIL() << "accepted a cache smaller than one expert";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one routed expert"), std::string::npos) << e.what();
  }
}

// serve --parallel / bench --batch: each sequence's state is planned; a budget
// that holds one but not eight says so with the numbers.
TEST(MemoryPlan, StateForEverySequenceOrARefusalNamingThem) {
  ModelFootprint f = footprint(1 * MiB, 1 * MiB);  // 28 MiB of state per sequence
  const MemoryPlan one = plan_memory(200 * MiB, f);
  f.sequences = 8;
  try {
    plan_memory(200 * MiB, f);
    FAIL() << "accepted 8 sequences' state in a budget for fewer";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--ram"), std::string::npos) << m;
    EXPECT_NE(m.find("8 sequences"), std::string::npos) << m;
    EXPECT_NE(m.find("4096 positions"), std::string::npos) << m;
  }
  f.sequences = 2;
  EXPECT_EQ(plan_memory(200 * MiB, f).state, 2 * one.state);
}

TEST(MemoryPlan, RequestChecksNameTheOption) {
  auto rejects = [](MemoryRequest r, const std::string& option) {
    try {
      check_memory_request(r);
      ADD_FAILURE() << option << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(option), std::string::npos) << e.what();
    }
  };
  MemoryRequest r;
  EXPECT_NO_THROW(check_memory_request(r));
  r.threads = -1;
  rejects(r, "--threads");
  r = {};
  r.ram_gib = -2;
  rejects(r, "--ram");
  r = {};
  r.policy = "mru";
  rejects(r, "--policy");
  r = {};
  r.read_kb = 6;
  rejects(r, "--read-kb");
  r = {};
  r.queue = "aio";
  rejects(r, "--queue");
  r = {};
  r.device = "cuda";
  rejects(r, "--device");
}

TEST(MemoryPlan, EngineOptionsCarryTheKnobs) {
  MemoryRequest r;
  r.policy = "heat";
  r.queue = "threads";
  r.queue_depth = 7;
  r.read_kb = 256;
  r.buffered = true;
  const MemoryPlan p = plan_memory(16 * kGiB, footprint(14 * kGiB));
  LoadOptions lo = load_options(p, r, "/m");
  EXPECT_TRUE(lo.stream_experts);
  EXPECT_TRUE(lo.prefetch);
  EXPECT_EQ(lo.spine_budget, p.spine_budget);
  EXPECT_EQ(lo.streaming.cache_bytes, p.expert_cache);
  EXPECT_EQ(lo.streaming.policy, "heat");
  EXPECT_EQ(lo.streaming.heat_file, "/m/sluice-expert-heat.txt");
  EXPECT_EQ(lo.streaming.queue, ReadQueue::Kind::Threads);
  EXPECT_EQ(lo.streaming.queue_depth, 7);
  EXPECT_EQ(lo.streaming.chunk_bytes, 256u * 1024);
  EXPECT_FALSE(lo.streaming.direct);
  r.no_prefetch = true;
  EXPECT_FALSE(load_options(p, r, "/m").prefetch);
  EXPECT_FALSE(load_options(plan_memory(0, footprint(14 * kGiB)), MemoryRequest{}, "/m").stream_experts);
}

// The engine plans with the model's own footprint and runs what it planned.
TEST(MemoryPlan, EngineOpensUnderItsPlan) {
  const std::string dir = test::fixture("../../models/sluice-k3-mini");
  MemoryRequest r;
  r.ram_gib = 0.02;
  r.context_tokens = 64;
  auto e = Engine::open(dir, r);
  const MemoryPlan& p = e->plan();
  EXPECT_EQ(p.footprint.spine_bytes, e->spine_bytes());
  EXPECT_EQ(p.footprint.expert_bytes, e->routed_expert_bytes());
  EXPECT_GT(p.footprint.state_bytes_per_token, 0u);  // MLA latent rows
  EXPECT_GT(p.footprint.state_bytes_fixed, 0u);      // KDA recurrent state
  EXPECT_TRUE(p.stream_spine);  // ~15 MB of spine in a 20 MiB budget
  EXPECT_GE(p.spine_budget, p.footprint.spine_stream_min_bytes);
  EXPECT_EQ(e->options().streaming.cache_bytes, p.expert_cache);
  Session s = e->session();
  s.feed({5, 17, 9});
  EXPECT_GT(e->expert_stats().bytes_read, 0u);
  EXPECT_GT(e->spine_stats().streamed_layers, 0);
  EXPECT_GT(e->expert_stats().evictions, 0u);  // ~12 MB of experts through a ~4 MiB cache
}


// `sluice info --ram N` prints the plan the engine opens under, without opening it.
TEST(MemoryPlan, InfoPrintsThePlanTheEngineOpensUnder) {
  const std::string dir = test::fixture("../../models/sluice-k3-mini");
  MemoryRequest r;
  r.ram_gib = 0.02;
  const MemoryPlan planned = Engine::plan(dir, r);
  auto e = Engine::open(dir, r);
  EXPECT_EQ(planned.budget, e->plan().budget);
  EXPECT_EQ(planned.expert_cache, e->plan().expert_cache);
  EXPECT_EQ(planned.spine_budget, e->plan().spine_budget);
  EXPECT_EQ(planned.state, e->plan().state);
  EXPECT_EQ(planned.footprint.context_tokens, e->plan().footprint.context_tokens);
  EXPECT_EQ(planned.footprint.context_tokens, e->context_length() > 0 ? std::min<int64_t>(4096, e->context_length()) : 4096);
  EXPECT_EQ(planned.reserve + planned.state + planned.spine_budget + planned.expert_cache, planned.budget);

  auto json = test::run_sluice({"info", "--model", dir, "--ram", "0.02", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  ASSERT_TRUE(j.contains("memory_plan")) << json.out;
  EXPECT_EQ(j["memory_plan"]["budget_bytes"].get<uint64_t>(), planned.budget);
  EXPECT_EQ(j["memory_plan"]["expert_cache_bytes"].get<uint64_t>(), planned.expert_cache);
  EXPECT_EQ(j["memory_plan"]["stream_spine"].get<bool>(), planned.stream_spine);
  auto text = test::run_sluice({"info", "--model", dir, "--ram", "0.02"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find(planned.describe()), std::string::npos) << text.out;
  // Without --ram: the plan for the memory available (the shipped model fits: mapped); --ram 0: none.
  auto avail = test::run_sluice({"info", "--model", dir, "--json"});
  ASSERT_EQ(avail.exit_code, 0) << avail.err;
  const auto aj = nlohmann::json::parse(avail.out);
  EXPECT_EQ(aj["memory_plan"]["budget_source"], "available") << avail.out;
  EXPECT_GT(aj["memory_plan"]["available_bytes"].get<uint64_t>(), 0u) << avail.out;
  EXPECT_FALSE(aj["memory_plan"]["stream_experts"].get<bool>()) << avail.out;
  auto none = test::run_sluice({"info", "--model", dir, "--ram", "0", "--json"});
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(nlohmann::json::parse(none.out)["memory_plan"]["budget_source"], "none") << none.out;
  auto bad = test::run_sluice({"info", "--model", dir, "--threads", "-1"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--threads"), std::string::npos) << bad.err;
}

// serve without --context-length (issue 38, finding 4: the shipped model's
// 1,048,576 positions were served whatever the memory): the largest context
// whose state for every sequence fits in what the weights leave.
ModelFootprint bare(uint64_t spine, uint64_t experts, uint64_t per_token, int64_t sequences) {
  ModelFootprint f = footprint(spine);
  f.expert_bytes = experts;
  f.state_bytes_per_token = per_token;
  f.context_tokens = 0;  // the fixed state only
  f.sequences = sequences;
  return f;
}

TEST(FittingContext, MappedIsWhatTheAvailableMemoryLeavesAfterEveryWeight) {
  AvailableMemory a;
  a.bytes = 20 * kGiB;  // less a 2 GiB margin: 18 GiB
  const ModelFootprint f = bare(2 * kGiB, 6 * kGiB, 64 * 1024, 2);
  const MemoryPlan p0 = plan_available(a, f);
  ASSERT_EQ(p0.budget, 0u);  // mapped
  const int64_t ctx = fitting_context(p0, a, 1 << 20);
  const uint64_t room = 18 * kGiB - 8 * kGiB - 2 * 24 * MiB - 768 * MiB;  // weights, fixed state, reserve
  EXPECT_EQ(ctx, int64_t(room / 2 / (64 * 1024)) / 1024 * 1024);
  EXPECT_LT(ctx, 1 << 20);
  // The plan for that context is still mapped; 1024 more would not be.
  ModelFootprint g = f;
  g.context_tokens = ctx;
  EXPECT_EQ(plan_available(a, g).budget, 0u);
  g.context_tokens = ctx + 1024;
  EXPECT_GT(plan_available(a, g).budget, 0u);
  // One sequence: twice the positions (within the rounding).
  ModelFootprint one = f;
  one.sequences = 1;
  EXPECT_GE(fitting_context(plan_available(a, one), a, 1 << 20), 2 * ctx);
}

TEST(FittingContext, AtMostTheModelsAndAtLeast4096) {
  AvailableMemory a;
  a.bytes = 20 * kGiB;
  const ModelFootprint f = bare(2 * kGiB, 6 * kGiB, 1000, 1);
  EXPECT_EQ(fitting_context(plan_available(a, f), a, 32768), 32768);
  // Memory for fewer than 4096 positions: 4096 (the plan says whether those fit).
  const ModelFootprint big = bare(2 * kGiB, 6 * kGiB, 8 * MiB, 1);
  EXPECT_EQ(fitting_context(plan_available(a, big), a, 1 << 20), 4096);
  EXPECT_EQ(fitting_context(plan_available(a, big), a, 2048), 2048);
  // Unknown memory, no budget: nothing bounds it but the model.
  EXPECT_EQ(fitting_context(plan_memory(0, f), AvailableMemory{}, 1 << 20), 1 << 20);
}

TEST(FittingContext, WithABudgetHalfOfWhatTheSpineLeavesAndTheSpineStaysResident) {
  const ModelFootprint f = bare(4 * kGiB, 100 * kGiB, 64 * 1024, 1);
  const MemoryPlan p0 = plan_memory(16 * kGiB, f);
  ASSERT_FALSE(p0.stream_spine);
  const int64_t ctx = fitting_context(p0, AvailableMemory{}, 1 << 20);
  const uint64_t used = 16 * kGiB / 10 + 24 * MiB + 4 * kGiB;
  EXPECT_EQ(ctx, int64_t((16 * kGiB - used) / 2 / (64 * 1024)) / 1024 * 1024);
  ModelFootprint g = f;
  g.context_tokens = ctx;
  const MemoryPlan p = plan_memory(16 * kGiB, g);
  EXPECT_FALSE(p.stream_spine);
  EXPECT_GE(p.expert_cache, p.state - 24 * MiB);  // the cache keeps at least what the context's state takes
  // A spine of over half the budget: the state takes no more than keeps it resident.
  const ModelFootprint heavy = bare(9 * kGiB, 100 * kGiB, 64 * 1024, 1);
  const MemoryPlan h0 = plan_memory(16 * kGiB, heavy);
  ASSERT_FALSE(h0.stream_spine);
  g = heavy;
  g.context_tokens = fitting_context(h0, AvailableMemory{}, 1 << 20);
  EXPECT_GT(g.context_tokens, 4096);
  EXPECT_FALSE(plan_memory(16 * kGiB, g).stream_spine);
}

}  // namespace
}  // namespace sluice::memory_plan_test
