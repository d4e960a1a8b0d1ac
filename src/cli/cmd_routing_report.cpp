// sluice routing-report: how a model routes real tokens, per MoE layer:
// expert-usage histogram, skew, entropy, reuse between consecutive tokens,
// reuse distance, and the hit rate an LRU cache of a given size would get.
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/memory_options.h"
#include "cluster/cluster.h"
#include "engine/engine.h"
#include "engine/route_recorder.h"
#include "experts/routing_log.h"
#include "experts/routing_stats.h"
#include "util/error.h"

namespace sluice::cli {
namespace {

struct Opts {
  std::string model, tokens, tokens_from, json_out;
  std::vector<int64_t> cache_sizes = {4, 8, 16, 32};
  MemoryRequest mem;
};

int run(const Opts& o) {
  std::vector<int32_t> ids = !o.tokens.empty() ? parse_token_list(o.tokens) : tokens_from_safetensors(o.tokens_from);
  if (ids.size() < 2) fail("need at least 2 tokens for a routing report");
  MemoryRequest mem = o.mem;
  mem.context_tokens = int64_t(ids.size());
  auto engine = Engine::open(model_or_default(o.model), mem);
  RoutingLog log;
  {
    // Not by wrapping the expert source (engine/route_recorder.h): that crashed every report under --ram N.
    RouteRecorder recorder(*engine);
    Session s = engine->session();
    for (int32_t t : ids) s.feed({t});  // one token per step: each request is one token's choice
    log = recorder.log();
  }
  const std::vector<int32_t> experts = engine->expert_index().experts_per_layer();
  const auto report = routing_report(log, experts, o.cache_sizes);

  std::printf("%-6s %8s %8s %8s %8s %9s %10s", "layer", "experts", "max/mean", "min/mean", "entropy", "reuse t-1",
              "mean dist");
  for (auto c : o.cache_sizes) std::printf(" %9s", fmt::format("LRU@{}", c).c_str());
  std::printf("\n");
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& r : report) {
    std::printf("%-6d %8d %8.2f %8.2f %8.3f %9.3f %10.1f", r.layer, r.experts, r.max_over_mean, r.min_over_mean,
                r.normalized_entropy, r.consecutive_reuse, r.mean_reuse_distance);
    for (double h : r.lru_hit_rate) std::printf(" %9.3f", h);
    std::printf("\n");
    layers.push_back({{"layer", r.layer}, {"experts", r.experts}, {"histogram", r.histogram},
                      {"max_over_mean", r.max_over_mean}, {"min_over_mean", r.min_over_mean},
                      {"normalized_entropy", r.normalized_entropy}, {"consecutive_reuse", r.consecutive_reuse},
                      {"uniform_consecutive_reuse", r.uniform_consecutive_reuse},
                      {"mean_reuse_distance", r.mean_reuse_distance}, {"lru_cache_sizes", r.lru_cache_sizes},
                      {"lru_hit_rate", r.lru_hit_rate}});
  }
  std::printf("(%zu tokens; consecutive reuse under uniform random routing would be k/E)\n", ids.size());
  const RoutingStats stats = routing_stats(log, experts);
  std::printf("previous-token overlap %.1f%%, hottest 30%% of experts %.1f%% of picks, %.1f distinct experts per %lld "
              "tokens, next layer predictable %.1f%%\n",
              100 * stats.prev_token_overlap, 100 * stats.hottest_30pct_share, stats.distinct_per_100_tokens,
              static_cast<long long>(stats.window_tokens), 100 * stats.next_layer_predictable);
  // The trace itself (each token's picks per layer, in request order): what a replay needs.
  nlohmann::json routes = nlohmann::json::array();
  for (const auto& [l, e] : log.steps) routes.push_back({l, e});
  if (!o.json_out.empty() && primary_rank())  // under mpirun rank 0 writes
    std::ofstream(o.json_out) << nlohmann::json{{"tokens", ids.size()}, {"layers", layers}, {"routing", stats.to_json()},
                                                {"routes", routes}}
                                     .dump(2);
  return 0;
}

void add_routing_report_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("routing-report", "Expert usage and reuse per MoE layer over a token sequence");
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "Model directory (default: $SLUICE_MODEL or the shipped sluice-k3-mini)");
  auto* t = cmd->add_option("--tokens", o->tokens, "Comma-separated token ids");
  auto* f = cmd->add_option("--tokens-from", o->tokens_from, "FILE:TENSOR with integer token ids (e.g. a reference's input_ids)");
  t->excludes(f);
  cmd->add_option("--cache-sizes", o->cache_sizes, "Per-layer LRU cache sizes (experts) to simulate")->capture_default_str();
  cmd->add_option("--json", o->json_out, "Also write the full report as JSON");
  add_memory_options(cmd, o->mem);
  cmd->callback([o, &action] {
    action = [o] {
      if (o->tokens.empty() && o->tokens_from.empty()) fail("give --tokens or --tokens-from");
      apply_memory_options(o->mem);
      return run(*o);
    };
  });
}

}  // namespace
SLUICE_COMMAND(70, add_routing_report_command);

}  // namespace sluice::cli
