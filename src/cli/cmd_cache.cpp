// sluice cache status|verify|prune: the on-disk expert cache of a stream-mode directory.
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "io/expert_disk_cache.h"
#include "model/architectures.h"
#include "store/manifest.h"
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
  if (!is_stream_dir(o.model)) fail("{} is not a stream-mode directory (no {}; see `sluice pull --stream`)", o.model, kRemoteFile);
  RemoteRepo repo = RemoteRepo::load(o.model);
  ExpertDiskCache cache(o.model);
  auto dec = load_decoder(o.model, false);
  const ExpertTable& t = dec->experts();
  int64_t experts = 0;
  uint64_t total = 0;
  for (int32_t l = 0; l < t.layers(); ++l)
    for (int32_t e = 0; e < t.experts(l); ++e) {
      ++experts;
      total += expert_bytes(t.at(l, e));
    }
  std::printf("%s: stream mode from %s (revision %s)\n", o.model.c_str(), repo.file_url("").c_str(), repo.revision.c_str());
  std::printf("experts cached: %zu of %lld, %s of %s%s\n", cache.entries().size(), (long long)experts,
              human_bytes(double(cache.bytes())).c_str(), human_bytes(double(total)).c_str(),
              cache.max_bytes() ? fmt::format(" (bound {})", human_bytes(double(cache.max_bytes()))).c_str() : " (unbounded)");
  std::printf("cached=%zu experts=%lld cached_bytes=%llu expert_bytes=%llu max_bytes=%llu\n", cache.entries().size(),
              (long long)experts, (unsigned long long)cache.bytes(), (unsigned long long)total,
              (unsigned long long)cache.max_bytes());
  return 0;
}

int cache_verify(const CacheOpts& o) {
  if (!is_stream_dir(o.model)) fail("{} is not a stream-mode directory", o.model);
  ExpertDiskCache cache(o.model);
  auto dec = load_decoder(o.model, false);
  const ExpertTable& t = dec->experts();
  std::vector<std::vector<uint64_t>> man;
  if (auto m = find_manifest(o.model)) man = m->checksum_table();
  int64_t ok = 0;
  std::vector<std::pair<int32_t, int32_t>> bad;
  for (const auto& [k, c] : cache.entries()) {
    const auto [l, e] = k;
    if (l >= t.layers() || e >= t.experts(l)) {
      std::printf("expert %d of layer %d: not an expert of this model\n", e, l);
      bad.push_back(k);
      continue;
    }
    auto ex = expert_extents(dec->checkpoint(), t.at(l, e));
    uint64_t bytes = 0;
    for (const auto& x : ex) bytes += x.length;
    const uint64_t h = hash_local_expert(dec->checkpoint(), ex);
    const bool has_man = l < int32_t(man.size()) && e < int32_t(man[size_t(l)].size());
    std::string why;
    if (bytes != c.bytes) why = fmt::format("recorded as {} bytes, is {}", c.bytes, bytes);
    else if (h != c.checksum) why = fmt::format("XXH3 {:016x}, recorded {:016x}", h, c.checksum);
    else if (has_man && h != man[size_t(l)][size_t(e)]) why = fmt::format("XXH3 {:016x}, manifest {:016x}", h, man[size_t(l)][size_t(e)]);
    if (why.empty()) {
      ++ok;
    } else {
      std::printf("expert %d of layer %d: CORRUPT (%s)\n", e, l, why.c_str());
      bad.push_back(k);
    }
  }
  if (o.drop && !bad.empty()) {
    for (auto k : bad) cache.unmark(k.first, k.second);
    cache.save();
    for (auto k : bad)
      if (k.first < t.layers() && k.second < t.experts(k.first))
        punch_expert(dec->checkpoint(), expert_extents(dec->checkpoint(), t.at(k.first, k.second)));
  }
  std::printf("verified %lld cached expert(s): %lld ok, %zu corrupt%s\n", (long long)(ok + int64_t(bad.size())),
              (long long)ok, bad.size(), bad.empty() ? "" : (o.drop ? " (dropped; fetched again on use)" : ""));
  return bad.empty() || o.drop ? 0 : 1;
}

int cache_prune(const CacheOpts& o) {
  if (!is_stream_dir(o.model)) fail("{} is not a stream-mode directory", o.model);
  ExpertDiskCache cache(o.model);
  uint64_t limit = o.all ? 0 : o.max_gb >= 0 ? uint64_t(o.max_gb * 1e9) : cache.max_bytes();
  if (!o.all && o.max_gb < 0 && limit == 0) fail("the cache has no bound: give --max GB or --all");
  if (o.max_gb >= 0 && !o.all) cache.set_max_bytes(limit);
  auto dec = load_decoder(o.model, false);
  const ExpertTable& t = dec->experts();
  std::vector<std::pair<int32_t, int32_t>> victims;
  uint64_t bytes = cache.bytes(), freed = 0;
  for (const auto& k : cache.lru_order()) {
    if (bytes <= limit) break;
    const uint64_t b = cache.find(k.first, k.second)->bytes;
    bytes -= b;
    freed += b;
    victims.push_back(k);
  }
  for (auto k : victims) cache.unmark(k.first, k.second);
  cache.save();  // unmark first, then free the bytes
  for (auto k : victims)
    if (k.first < t.layers() && k.second < t.experts(k.first))
      punch_expert(dec->checkpoint(), expert_extents(dec->checkpoint(), t.at(k.first, k.second)));
  std::printf("pruned %zu expert(s), %s freed; %zu cached (%s)\n", victims.size(), human_bytes(double(freed)).c_str(),
              cache.entries().size(), human_bytes(double(cache.bytes())).c_str());
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
