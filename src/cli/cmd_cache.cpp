// sluice cache status|verify|prune: the on-disk expert cache of a stream-mode directory.
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "experts/expert_cache_maintenance.h"
#include "util/checked_number.h"
#include "util/error.h"
#include "util/progress.h"

namespace sluice::cli {
namespace {

struct CacheOpts {
  std::string model;
  double max_gb = -1;
  bool all = false, drop = false;
};

int cache_status(const CacheOpts& o) {
  const CacheStatus s = expert_cache_status(o.model);
  std::printf("%s: stream mode from %s (revision %s)\n", o.model.c_str(), s.repo.file_url("").c_str(),
              s.repo.revision.c_str());
  std::printf("experts cached: %lld of %lld, %s of %s%s\n", (long long)s.cached, (long long)s.experts,
              human_bytes(double(s.cached_bytes)).c_str(), human_bytes(double(s.expert_bytes)).c_str(),
              s.max_bytes ? fmt::format(" (bound {})", human_bytes(double(s.max_bytes))).c_str() : " (unbounded)");
  std::printf("cached=%lld experts=%lld cached_bytes=%llu expert_bytes=%llu max_bytes=%llu\n", (long long)s.cached,
              (long long)s.experts, (unsigned long long)s.cached_bytes, (unsigned long long)s.expert_bytes,
              (unsigned long long)s.max_bytes);
  return 0;
}

int cache_verify(const CacheOpts& o) {
  const CacheVerifyResult r = verify_expert_cache(o.model, o.drop);
  for (const auto& p : r.corrupt)
    std::printf("expert %d of layer %d: %s\n", p.expert, p.layer,
                p.why == "not an expert of this model" ? p.why.c_str() : fmt::format("CORRUPT ({})", p.why).c_str());
  std::printf("verified %lld cached expert(s): %lld ok, %zu corrupt%s\n", (long long)(r.ok + int64_t(r.corrupt.size())),
              (long long)r.ok, r.corrupt.size(),
              r.corrupt.empty() ? "" : (r.dropped ? " (dropped; fetched again on use)" : ""));
  return r.corrupt.empty() || r.dropped ? 0 : 1;
}

int cache_prune(const CacheOpts& o) {
  const bool given = o.max_gb >= 0 && !o.all;
  const uint64_t limit = o.all ? 0 : given ? checked_bytes(o.max_gb, 1e9, "--max (GB)") : expert_cache_bound(o.model);
  if (!o.all && !given && limit == 0) fail("the cache has no bound: give --max GB or --all");
  const CachePruneResult r = prune_expert_cache(o.model, limit, given);
  std::printf("pruned %lld expert(s), %s freed; %lld cached (%s)\n", (long long)r.evicted,
              human_bytes(double(r.freed_bytes)).c_str(), (long long)r.remaining,
              human_bytes(double(r.remaining_bytes)).c_str());
  return 0;
}

void add_cache_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("cache", "Inspect the on-disk expert cache of a stream-mode model (sluice pull --stream)");
  cmd->require_subcommand(1);
  auto o = std::make_shared<CacheOpts>();
  auto* st = cmd->add_subcommand("status", "Experts cached, bytes, bound");
  auto* ve = cmd->add_subcommand("verify", "Re-hash every cached expert against its recorded (and published) checksum");
  auto* pr = cmd->add_subcommand("prune", "Evict least recently used experts down to a bound");
  for (auto* c : {st, ve, pr}) c->add_option("--model", o->model, "Model directory")->required();
  ve->add_flag("--drop", o->drop, "Unmark corrupt experts (they are fetched again on use)");
  pr->add_option("--max", o->max_gb, "Bound in GB (default: the one set by pull --cache-max)");
  pr->add_flag("--all", o->all, "Evict every cached expert");
  st->callback([o, &action] { action = [o] { return cache_status(*o); }; });
  ve->callback([o, &action] { action = [o] { return cache_verify(*o); }; });
  pr->callback([o, &action] { action = [o] { return cache_prune(*o); }; });
}

}  // namespace
SLUICE_COMMAND(70, add_cache_command);

}  // namespace sluice::cli
