// sluice verify: a prepared checkpoint against its manifest's sizes and checksums.
#include <cstdio>

#include "cli/commands.h"
#include "store/verify.h"
#include "util/error.h"

namespace sluice::cli {

namespace {
void add_verify_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "verify", "Check a prepared checkpoint against sluice-manifest.json: shard sizes, every routed expert's XXH3-64, "
                "and the XXH3-64 of the shards' other bytes and of the spine file (exit status 1 on any mismatch)");
  struct Opts {
    std::string model;
    bool quiet = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "Model directory with sluice-manifest.json (from `sluice prepare`)")->required();
  cmd->add_flag("--quiet", o->quiet, "No progress on stderr");
  cmd->callback([o, &action] {
    action = [o] {
      const VerifyReport r = verify_checkpoint(o->model, !o->quiet);
      for (const auto& p : r.problems) std::printf("MISMATCH %s\n", p.c_str());
      for (const auto& u : r.unchecked) std::printf("NOT CHECKED %s\n", u.c_str());
      std::printf("%s: %lld files, %lld experts (%.1f MB) and the spine (%.1f MB) checked, %zu mismatches\n",
                  o->model.c_str(), (long long)r.files, (long long)r.experts, double(r.bytes) / 1e6,
                  double(r.spine_bytes) / 1e6, r.problems.size());
      return r.ok() ? 0 : 1;
    };
  });
}
}  // namespace
SLUICE_COMMAND(72, add_verify_command);

}  // namespace sluice::cli
