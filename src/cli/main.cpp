// sluice: run Mixture-of-Experts models larger than memory.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cluster/cluster.h"
#include "format/model_dir.h"
#include "util/error.h"

namespace sluice::cli {
std::vector<std::pair<int, CommandSetup>>& command_registry() {
  static std::vector<std::pair<int, CommandSetup>> r;
  return r;
}
CommandRegistrar::CommandRegistrar(int order, CommandSetup setup) { command_registry().push_back({order, setup}); }

// $SLUICE_MODEL, else the shipped model where `cmake --install` (or the .deb)
// put it beside this binary, else the source tree the binary was built from.
std::string default_model_dir() {
  const char* env = std::getenv("SLUICE_MODEL");
  if (env && *env) return env;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path installed = (exe.parent_path() / SLUICE_INSTALLED_MODEL).lexically_normal();
    if (std::filesystem::exists(installed / "config.json", ec)) return installed.string();
  }
  return SLUICE_DEFAULT_MODEL;
}

std::string model_or_default(const std::string& given, bool weights) {
  if (!given.empty()) {
    if (weights) check_model_dir(given);
    else check_directory(given);
    return given;
  }
  const char* env = std::getenv("SLUICE_MODEL");
  std::string d = default_model_dir();
  if (!std::filesystem::exists(d + "/config.json"))
    fail("no --model given and the default model {} ({}) has no config.json: pass --model DIR, or install "
         "sluice with its model (cmake --install, or the .deb)",
         d, env && *env ? "from $SLUICE_MODEL" : "the shipped sluice-k3-mini");
  return d;
}
}  // namespace sluice::cli

namespace {
// A failed command ends the job: under mpirun the other ranks would wait for this one forever.
int failed(sluice::Cluster* cluster, const char* what, const char* message, int code) {
  if (cluster && cluster->ranks() > 1) cluster->abort(fmt::format("{}{}", what, message), code);
  std::fprintf(stderr, "sluice: %s%s\n", what, message);
  return code;
}
}  // namespace

int main(int argc, char** argv) {
  // Under mpirun this process is one rank of a job (src/cluster/): every rank runs the command.
  std::unique_ptr<sluice::Cluster> cluster;
  try {
    cluster = sluice::join_cluster(argc, argv);
  } catch (const sluice::Error& e) {
    std::fprintf(stderr, "sluice: error: %s\n", e.what());
    return 1;
  }
  CLI::App app{"sluice: exact Mixture-of-Experts inference with experts streamed from disk"};
  app.require_subcommand(1);
  sluice::cli::Action action;
  auto reg = sluice::cli::command_registry();
  std::sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.first < b.first; });
  for (auto& [_, setup] : reg) setup(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return action ? action() : 2;
  } catch (const sluice::Error& e) {
    return failed(cluster.get(), "error: ", e.what(), 1);
  } catch (const std::exception& e) {
    return failed(cluster.get(), "internal error: ", e.what(), 3);
  }
}
