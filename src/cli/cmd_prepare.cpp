// sluice prepare: spine file + expert manifest next to a checkpoint.
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "store/expert_dirs.h"
#include "store/prepare.h"
#include "util/error.h"
#include "util/progress.h"

namespace sluice::cli {
namespace {

void add_prepare_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "prepare", "Write the resident spine (bf16 or row-wise int8) and the routed-expert manifest next to a checkpoint");
  auto o = std::make_shared<PrepareOptions>();
  auto quiet = std::make_shared<bool>(false);
  cmd->add_option("--model", o->dir, "Checkpoint directory to prepare (required: the files are written next to it)")
      ->required();
  cmd->add_option("--spine", o->spine, "Spine precision: bf16 (as released) or int8 (one scale per output row)")
      ->capture_default_str();
  cmd->add_flag("--pack-experts", o->pack_experts,
                "Also copy routed experts into per-layer packs, one 4 KiB-aligned extent per expert");
  cmd->add_option("--expert-dirs", o->expert_dirs,
                  "With --pack-experts: spread the packs over these directories (one per drive, comma-separated; "
                  "each expert's projections on different drives, bytes balanced per layer)")
      ->delimiter(',');
  auto relocate = std::make_shared<bool>(false);
  cmd->add_flag("--relocate", *relocate,
                "Only record that the packs prepared with --expert-dirs now live in the --expert-dirs given (same "
                "order; every pack is checked for its size); writes nothing else");
  cmd->add_flag("--quiet", *quiet, "No progress display");
  cmd->callback([o, quiet, relocate, &action] {
    action = [o, quiet, relocate] {
      if (*relocate) {
        if (o->expert_dirs.empty()) fail("--relocate needs --expert-dirs (the directories the packs are in now)");
        const int64_t n = relocate_expert_dirs(o->dir, o->expert_dirs);
        std::printf("%s: %lld packs found in %zu expert directories; manifest updated\n", o->dir.c_str(),
                    (long long)n, o->expert_dirs.size());
        return 0;
      }
      o->progress = !*quiet;
      PrepareResult r = prepare(*o);
      std::printf("prepared %s: spine %s (%s%s), %lld experts (%s) checksummed%s%s\n", o->dir.c_str(),
                  human_bytes(double(r.spine_bytes)).c_str(), o->spine.c_str(), r.spine_reused ? ", kept" : "",
                  (long long)r.experts, human_bytes(double(r.expert_bytes)).c_str(),
                  r.experts_resumed ? fmt::format(", {} resumed", r.experts_resumed).c_str() : "",
                  r.packs ? fmt::format(", {} expert packs", r.packs).c_str() : "");
      return 0;
    };
  });
}

}  // namespace
SLUICE_COMMAND(40, add_prepare_command);

}  // namespace sluice::cli
