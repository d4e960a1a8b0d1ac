// sluice routing-report: how a model routes real tokens, per MoE layer:
// expert-usage histogram, skew, entropy, reuse between consecutive tokens,
// reuse distance, and the hit rate an LRU cache of a given size would get.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <cstring>
#include <map>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "format/safetensors.h"
#include "io/routing_log.h"
#include "model/architectures.h"
#include "runtime/session.h"
#include "util/error.h"

namespace sluice::cli {
namespace {

struct Opts {
  std::string model, tokens, tokens_from, json_out;
  std::vector<int64_t> cache_sizes = {4, 8, 16, 32};
};

int run(const Opts& o) {
  std::vector<int32_t> ids = !o.tokens.empty() ? parse_token_list(o.tokens) : tokens_from_safetensors(o.tokens_from);
  if (ids.size() < 2) fail("need at least 2 tokens for a routing report");
  auto model = load_decoder(o.model, true);
  RoutingLog log;
  ExpertSource& inner = model->expert_source();
  auto rec = std::make_unique<RecordingExperts>(inner, log);
  model->set_expert_source(std::move(rec));
  Session s(*model);
  for (int32_t t : ids) s.feed({t});  // one token per step: each request is one token's choice
  std::map<int32_t, std::vector<std::vector<int32_t>>> per_layer;
  for (auto& [l, e] : log.steps) per_layer[l].push_back(e);
  nlohmann::json layers = nlohmann::json::array();
  std::printf("%-6s %8s %8s %8s %8s %9s %10s", "layer", "experts", "max/mean", "min/mean", "entropy", "reuse t-1",
              "mean dist");
  for (auto c : o.cache_sizes) std::printf(" %9s", fmt::format("LRU@{}", c).c_str());
  std::printf("\n");
  for (auto& [l, steps] : per_layer) {
    const int32_t E = model->experts().experts(l);
    std::vector<int64_t> hist(static_cast<size_t>(E), 0);
    int64_t uses = 0, reused = 0, picks_after_first = 0;
    double dist_sum = 0;
    int64_t dist_n = 0;
    std::vector<int64_t> last(static_cast<size_t>(E), -1);
    for (size_t t = 0; t < steps.size(); ++t) {
      for (int32_t e : steps[t]) {
        ++hist[size_t(e)];
        ++uses;
        if (last[size_t(e)] >= 0) {
          dist_sum += double(int64_t(t) - last[size_t(e)]);
          ++dist_n;
        }
        last[size_t(e)] = int64_t(t);
        if (t > 0) {
          ++picks_after_first;
          if (std::find(steps[t - 1].begin(), steps[t - 1].end(), e) != steps[t - 1].end()) ++reused;
        }
      }
    }
    const double mean = double(uses) / E;
    double ent = 0;
    for (auto h : hist)
      if (h) ent -= (double(h) / uses) * std::log(double(h) / uses);
    ent /= std::log(double(E));
    // Ideal LRU cache of C experts for this layer alone.
    std::vector<double> lru_hits;
    for (auto C : o.cache_sizes) {
      std::vector<int32_t> cache;  // most recent at the back
      int64_t hits = 0;
      for (const auto& st : steps)
        for (int32_t e : st) {
          auto it = std::find(cache.begin(), cache.end(), e);
          if (it != cache.end()) {
            ++hits;
            cache.erase(it);
          } else if (int64_t(cache.size()) >= C) {
            cache.erase(cache.begin());
          }
          cache.push_back(e);
        }
      lru_hits.push_back(double(hits) / double(uses));
    }
    const double mx = double(*std::max_element(hist.begin(), hist.end())) / mean;
    const double mn = double(*std::min_element(hist.begin(), hist.end())) / mean;
    const double reuse = picks_after_first ? double(reused) / double(picks_after_first) : 0;
    std::printf("%-6d %8d %8.2f %8.2f %8.3f %9.3f %10.1f", l, E, mx, mn, ent, reuse, dist_n ? dist_sum / dist_n : 0.0);
    for (double h : lru_hits) std::printf(" %9.3f", h);
    std::printf("\n");
    layers.push_back({{"layer", l}, {"experts", E}, {"histogram", hist}, {"max_over_mean", mx}, {"min_over_mean", mn},
                      {"normalized_entropy", ent}, {"consecutive_reuse", reuse},
                      {"uniform_consecutive_reuse", double(steps[0].size()) / E},
                      {"mean_reuse_distance", dist_n ? dist_sum / dist_n : 0.0}, {"lru_cache_sizes", o.cache_sizes},
                      {"lru_hit_rate", lru_hits}});
  }
  std::printf("(%zu tokens; consecutive reuse under uniform random routing would be k/E)\n", ids.size());
  if (!o.json_out.empty()) std::ofstream(o.json_out) << nlohmann::json{{"tokens", ids.size()}, {"layers", layers}}.dump(2);
  return 0;
}

void add_routing_report_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("routing-report", "Expert usage and reuse per MoE layer over a token sequence");
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "Model directory")->required();
  auto* t = cmd->add_option("--tokens", o->tokens, "Comma-separated token ids");
  auto* f = cmd->add_option("--tokens-from", o->tokens_from, "FILE:TENSOR with integer token ids (e.g. a reference's input_ids)");
  t->excludes(f);
  cmd->add_option("--cache-sizes", o->cache_sizes, "Per-layer LRU cache sizes (experts) to simulate")->capture_default_str();
  cmd->add_option("--json", o->json_out, "Also write the full report as JSON");
  cmd->callback([o, &action] {
    action = [o] {
      if (o->tokens.empty() && o->tokens_from.empty()) fail("give --tokens or --tokens-from");
      return run(*o);
    };
  });
}

}  // namespace
SLUICE_COMMAND(70, add_routing_report_command);

}  // namespace sluice::cli
