// sluice pull: download a checkpoint (every shard, or only the spine for stream mode).
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "store/pull.h"
#include "util/checked_number.h"
#include "util/error.h"
#include "util/progress.h"

namespace sluice::cli {
namespace {

void add_pull_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "pull", "Download a model from a Hugging Face style repository: every shard (--full) or only the resident "
              "spine, fetching routed experts on first use (--stream)");
  auto o = std::make_shared<PullOptions>();
  auto full = std::make_shared<bool>(false), stream = std::make_shared<bool>(false), quiet = std::make_shared<bool>(false);
  auto cache_gb = std::make_shared<double>(0);
  auto chunk_mb = std::make_shared<double>(8);
  cmd->add_option("source", o->source, "Repository (org/name) or URL (https://host/org/name)")->required();
  cmd->add_option("--dir", o->dir, "Local directory")->required();
  auto* f = cmd->add_flag("--full", *full, "Download every shard (default)");
  auto* s = cmd->add_flag("--stream", *stream, "Download the spine only; experts are fetched on first use");
  f->excludes(s);
  cmd->add_option("--revision", o->revision, "Branch, tag or commit")->capture_default_str();
  cmd->add_option("--base", o->base, "Repository host (default: $SLUICE_HF_BASE or https://huggingface.co)");
  cmd->add_option("--parallel", o->parallel, "Range requests in flight")->capture_default_str();
  cmd->add_option("--chunk-mb", *chunk_mb, "Largest range request, in MiB")->capture_default_str();
  cmd->add_option("--cache-max", *cache_gb, "Stream mode: bound on the on-disk expert cache in GB (0: unbounded)");
  cmd->add_flag("--quiet", *quiet, "No progress display");
  cmd->callback([=, &action] {
    (void)full;  // keeps the --full flag's target alive as long as the command
    action = [=] {
      o->stream = *stream;
      o->progress = !*quiet;
      if (*cache_gb < 0) fail("--cache-max must be >= 0");
      if (*cache_gb > 0 && !o->stream) fail("--cache-max only applies to --stream");
      if (*chunk_mb <= 0) fail("--chunk-mb must be positive");
      if (o->parallel < 1) fail("--parallel must be >= 1");
      o->cache_max_bytes = checked_bytes(*cache_gb, 1e9, "--cache-max (GB)");
      o->chunk_bytes = checked_bytes(*chunk_mb, double(1 << 20), "--chunk-mb (MiB)");
      PullResult r = pull(*o);
      std::printf("pulled %s into %s (%s): %d shard(s) of %s, %s local; downloaded %s this run%s%s\n",
                  o->source.c_str(), o->dir.c_str(), o->stream ? "stream" : "full", r.shards,
                  human_bytes(double(r.shard_bytes)).c_str(), human_bytes(double(r.local_bytes)).c_str(),
                  human_bytes(double(r.downloaded)).c_str(),
                  r.resumed ? fmt::format(", {} already present", human_bytes(double(r.resumed))).c_str() : "",
                  r.experts_verified ? fmt::format(", {} experts verified", r.experts_verified).c_str() : "");
      std::printf("bytes: downloaded=%llu resumed=%llu shard=%llu local=%llu\n", (unsigned long long)r.downloaded,
                  (unsigned long long)r.resumed, (unsigned long long)r.shard_bytes, (unsigned long long)r.local_bytes);
      return 0;
    };
  });
}

}  // namespace
SLUICE_COMMAND(35, add_pull_command);

}  // namespace sluice::cli
