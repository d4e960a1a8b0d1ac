// Benchmark-only routing sources (experts/route_override.h): the synthetic
// generator reaches the statistics it is asked for (as bench measures them),
// a trace replays exactly the recorded ids, bad traces name the file and the
// field, and bench under an override says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "bench/benchmark.h"
#include "experts/route_override.h"
#include "experts/routing_stats.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::route_override_test {
namespace {

// `tokens` decode steps through every MoE layer in order, one token per pass, as bench's recorder logs them.
RoutingLog drive(RouteOverride& src, const std::vector<int32_t>& experts, int64_t k, int tokens, bool hints = false) {
  RoutingLog log;
  std::vector<int32_t> ids(static_cast<size_t>(k)), guess(static_cast<size_t>(k));
  for (int t = 0; t < tokens; ++t)
    for (int32_t l = 0; l < int32_t(experts.size()); ++l) {
      if (experts[size_t(l)] == 0) continue;
      if (hints) {
        EXPECT_TRUE(src.hint(l, 1, k, guess.data()));
      }
      src.route(l, 1, k, ids.data());
      std::set<int32_t> distinct(ids.begin(), ids.end());
      EXPECT_EQ(int64_t(distinct.size()), k) << "layer " << l << " token " << t;
      EXPECT_GE(*distinct.begin(), 0);
      EXPECT_LT(*distinct.rbegin(), experts[size_t(l)]);
      log.steps.push_back({l, std::vector<int32_t>(distinct.begin(), distinct.end())});
    }
  return log;
}

TEST(RouteOverride, SyntheticMeetsTheK3Targets) {
  const std::vector<int32_t> experts = {0, 384, 384, 384, 384};  // a dense first layer, then K2-sized MoE layers
  const SyntheticRoutingSpec spec = parse_synthetic_routing("overlap=0.31,hot=0.86,next_layer=0.5,seed=7");
  auto src = synthetic_routing(spec, experts);
  const RoutingStats s = routing_stats(drive(*src, experts, 8, 2000), experts);
  EXPECT_EQ(s.tokens, 2000);
  EXPECT_NEAR(s.prev_token_overlap, 0.31, 0.03);
  EXPECT_NEAR(s.hottest_30pct_share, 0.86, 0.03);
  EXPECT_NEAR(s.next_layer_predictable, 0.5, 0.08);
  EXPECT_NE(src->describe().find("overlap=0.31"), std::string::npos) << src->describe();
}

TEST(RouteOverride, SyntheticFollowsOtherTargets) {
  const std::vector<int32_t> experts = {0, 96, 96, 96};
  auto src = synthetic_routing(parse_synthetic_routing("overlap=0.6,hot=0.5,next_layer=0.2"), experts);
  const RoutingStats s = routing_stats(drive(*src, experts, 6, 2000), experts);
  EXPECT_NEAR(s.prev_token_overlap, 0.6, 0.03);
  EXPECT_NEAR(s.hottest_30pct_share, 0.5, 0.05);
  EXPECT_NEAR(s.next_layer_predictable, 0.2, 0.08);
}

// The prefetch guess draws the pass the routing then returns, and is right about next_layer of the time.
TEST(RouteOverride, SyntheticHintIsTheNextPassAtTheTargetRate) {
  const std::vector<int32_t> experts = {64, 64};
  const int64_t k = 4;
  auto a = synthetic_routing(parse_synthetic_routing("next_layer=0.5,seed=3"), experts);
  std::vector<int32_t> guess(4), ids(4);
  int64_t right = 0, n = 0;
  for (int t = 0; t < 500; ++t) {
    ASSERT_TRUE(a->hint(1, 1, k, guess.data()));
    a->route(1, 1, k, ids.data());
    for (int32_t g : guess) right += std::find(ids.begin(), ids.end(), g) != ids.end();
    n += k;
  }
  EXPECT_NEAR(double(right) / double(n), 0.5, 0.06);
  // Same seed, same routes.
  auto b = synthetic_routing(parse_synthetic_routing("seed=9"), experts);
  auto c = synthetic_routing(parse_synthetic_routing("seed=9"), experts);
  std::vector<int32_t> x(4), y(4);
  for (int t = 0; t < 20; ++t) {
    b->route(t % 2, 1, k, x.data());
    c->route(t % 2, 1, k, y.data());
    ASSERT_EQ(x, y);
  }
}

TEST(RouteOverride, SyntheticSpecErrorsNameTheKey) {
  EXPECT_THROW(parse_synthetic_routing("overlap=1.5"), Error);
  EXPECT_THROW(parse_synthetic_routing("overlap=abc"), Error);
  EXPECT_THROW(parse_synthetic_routing("heat=0.5"), Error);
  EXPECT_THROW(parse_synthetic_routing("overlap"), Error);
  try {
    parse_synthetic_routing("heat=0.5");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("heat"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_synthetic_routing("k3").overlap, 0.31);
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(RouteOverride, TraceReplaysTheRecordedIdsInOrderAndCycles) {
  // Two MoE layers (1, 2) of 8 experts, top-2, three recorded tokens.
  const std::string path = write_file(
      "sluice_route_trace_ok.json",
      R"({"tokens": 3, "routes": [[1, [0, 5]], [2, [3, 7]], [1, [2, 5]], [2, [1, 3]], [1, [6, 7]], [2, [0, 4]]]})");
  auto src = routing_trace(path, {0, 8, 8});
  EXPECT_NE(src->describe().find(path), std::string::npos);
  EXPECT_NE(src->describe().find("3 recorded tokens"), std::string::npos) << src->describe();
  std::vector<int32_t> ids(4);
  src->route(1, 2, 2, ids.data());  // a pass of two tokens takes two entries
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 5, 2, 5}));
  src->route(2, 1, 2, ids.data());
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 2), (std::vector<int32_t>{3, 7}));
  src->route(1, 2, 2, ids.data());  // the third entry, then the first again
  EXPECT_EQ(ids, (std::vector<int32_t>{6, 7, 0, 5}));
  std::vector<int32_t> guess(2);
  EXPECT_FALSE(src->hint(1, 1, 2, guess.data()));  // a recording has no guess
}

void expect_trace_error(const std::string& name, const std::string& text, const std::vector<int32_t>& experts,
                        const std::string& needle, int64_t k = 2) {
  const std::string path = write_file(name, text);
  try {
    auto src = routing_trace(path, experts);
    std::vector<int32_t> ids(static_cast<size_t>(k));
    for (int32_t l = 0; l < int32_t(experts.size()); ++l)
      if (experts[size_t(l)] > 0) src->route(l, 1, k, ids.data());
    ADD_FAILURE() << "no error for " << text;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

TEST(RouteOverride, MalformedTracesNameTheFileAndField) {
  const std::vector<int32_t> experts = {0, 8, 8};
  expect_trace_error("sluice_rt_notjson.json", "{not json", experts, "not JSON");
  expect_trace_error("sluice_rt_noroutes.json", R"({"tokens": 3})", experts, "\"routes\"");
  expect_trace_error("sluice_rt_shape.json", R"({"routes": [[1, 0, 5]]})", experts, "\"routes\"[0]");
  expect_trace_error("sluice_rt_dense.json", R"({"routes": [[0, [1, 2]], [1, [0, 1]], [2, [0, 1]]]})", experts,
                     "layer 0 is not a MoE layer");
  expect_trace_error("sluice_rt_missing.json", R"({"routes": [[1, [1, 2]]]})", experts, "MoE layer 2");
  expect_trace_error("sluice_rt_range.json", R"({"routes": [[1, [1, 9]], [2, [0, 1]]]})", experts, "\"routes\"[0]");
  expect_trace_error("sluice_rt_twice.json", R"({"routes": [[1, [1, 1]], [2, [0, 1]]]})", experts, "twice");
  expect_trace_error("sluice_rt_k.json", R"({"routes": [[1, [1, 2, 3]], [2, [0, 1, 2]]]})", experts,
                     "the model picks 2");
  // Cannot read.
  try {
    routing_trace("/nonexistent/sluice_trace.json", experts);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/sluice_trace.json"), std::string::npos);
  }
}

BenchRequest tiny_request() {
  BenchRequest r;
  r.model = test::fixture("golden/deepseek_v3_tiny");  // layers 1-3 MoE, 32 experts, top-4
  r.mem.ram_gib = 0.02;
  r.tokens = 40;
  r.prompt_tokens = 6;
  r.probe_seconds = 0;
  return r;
}

// Bench under the synthetic override: labelled first and last, in the JSON too, and the routes taken
// (bench's own recorder, fed by the MoE blocks' requests) have the asked-for overlap, not the model's.
TEST(RouteOverride, BenchLabelsTheSyntheticOverride) {
  BenchRequest r = tiny_request();
  r.routing_synthetic = "overlap=0.8,hot=0.86,next_layer=0.5";
  const BenchResult res = run_benchmark(r);
  ASSERT_GE(res.summary.size(), 2u);
  for (const std::string& line : {res.summary.front(), res.summary.back()}) {
    EXPECT_NE(line.find("routing: benchmark-only override (synthetic overlap=0.8"), std::string::npos) << line;
    EXPECT_NE(line.find("the model's own routing is not used; tokens are not the model's"), std::string::npos) << line;
  }
  EXPECT_NE(res.json["routing_override"].get<std::string>().find("synthetic overlap=0.8"), std::string::npos);
  EXPECT_NEAR(res.json["routing"]["prev_token_overlap"].get<double>(), 0.8, 0.1) << res.json["routing"].dump();
  // Without an override: no label, null in the JSON.
  BenchRequest plain = tiny_request();
  plain.tokens = 2;
  const BenchResult p = run_benchmark(plain);
  EXPECT_TRUE(p.json["routing_override"].is_null());
  for (const std::string& line : p.summary) EXPECT_EQ(line.find("override"), std::string::npos) << line;
}

// Bench under a trace: each decoded token's requests are exactly the recorded ids (the trace is long
// enough to cover prefill and decode without cycling, and its entries differ so an off-by-one shows).
TEST(RouteOverride, BenchReplaysTheTraceExactly) {
  BenchRequest r = tiny_request();
  r.tokens = 5;
  nlohmann::json routes = nlohmann::json::array();
  const int tokens = int(r.prompt_tokens + r.tokens);
  for (int t = 0; t < tokens; ++t)
    for (int l = 1; l <= 3; ++l) {
      // Distinct by construction (four disjoint ranges), partly shared with the previous token.
      const std::vector<int32_t> ids = {l, t % 3 + 4, t % 5 + 8, (t * 7 + l) % 13 + 16};
      routes.push_back({l, ids});
    }
  r.routing_trace = write_file("sluice_rt_bench.json", nlohmann::json{{"routes", routes}}.dump());
  const BenchResult res = run_benchmark(r);
  EXPECT_NE(res.summary.front().find("routing: benchmark-only override (trace " + r.routing_trace), std::string::npos)
      << res.summary.front();
  // The recorded decode overlap, computed from the trace's decode tokens, is what bench measured.
  RoutingLog decode_log;
  for (int t = int(r.prompt_tokens); t < tokens; ++t)
    for (int l = 1; l <= 3; ++l) decode_log.steps.push_back({l, routes[size_t((t * 3) + l - 1)][1].get<std::vector<int32_t>>()});
  const RoutingStats want = routing_stats(decode_log, {0, 32, 32, 32});
  EXPECT_DOUBLE_EQ(res.json["routing"]["prev_token_overlap"].get<double>(), want.prev_token_overlap);
  EXPECT_DOUBLE_EQ(res.json["routing"]["hottest_30pct_share"].get<double>(), want.hottest_30pct_share);
  EXPECT_DOUBLE_EQ(res.json["routing"]["next_layer_predictable"].get<double>(), want.next_layer_predictable);
  EXPECT_DOUBLE_EQ(res.json["routing"]["distinct_per_100_tokens"].get<double>(), want.distinct_per_100_tokens);
  EXPECT_GT(want.prev_token_overlap, 0.0);
}

TEST(RouteOverride, BenchRejectsOverrideOutsideDecode) {
  BenchRequest r = tiny_request();
  r.routing_synthetic = "k3";
  r.routing_trace = "x.json";
  EXPECT_THROW(run_benchmark(r), Error);
  r.routing_trace.clear();
  r.generate = true;
  EXPECT_THROW(run_benchmark(r), Error);
  r.generate = false;
  r.routing_synthetic = "overlap=2";
  EXPECT_THROW(run_benchmark(r), Error);
}

}  // namespace
}  // namespace sluice::route_override_test

namespace sluice::route_override_test {
namespace {

// The whole path on the command line: routing-report records a trace while streaming experts under
// --ram (it crashed there: its recorder wrapped a source that installing the recorder freed), and
// bench replays it, saying so on its first and last lines and in its JSON. run takes no such flag.
TEST(RouteOverride, CliRecordsUnderStreamingAndBenchReplays) {
  test::TempDir tmp;
  const std::string model = test::fixture("golden/deepseek_v3_tiny");
  auto rec = test::run_sluice({"routing-report", "--model", model, "--ram", "0.02", "--tokens",
                               "1,5,9,13,2,6,10,14,3,7", "--json", tmp.file("trace.json")});
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  std::ifstream in(tmp.file("trace.json"));
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["routes"].size(), 30u);  // 10 tokens x 3 MoE layers
  auto b = test::run_sluice({"bench", "--model", model, "--ram", "0.02", "--tokens", "4", "--prompt-tokens", "3",
                             "--probe-seconds", "0", "--routing-trace", tmp.file("trace.json"), "--json",
                             tmp.file("bench.json")});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(b.out.rfind("routing: benchmark-only override (trace ", 0), 0u) << b.out;
  EXPECT_NE(b.out.find("tokens are not the model's\n", b.out.size() - 200), std::string::npos) << b.out;
  std::ifstream bj(tmp.file("bench.json"));
  EXPECT_NE(nlohmann::json::parse(bj)["routing_override"].get<std::string>().find("trace "), std::string::npos);
  auto run = test::run_sluice({"run", "--model", model, "--routing-synthetic", "k3", "hello"});
  EXPECT_NE(run.exit_code, 0);
}

}  // namespace
}  // namespace sluice::route_override_test
