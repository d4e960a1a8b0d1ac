// sluice info [--json] [--ram N]: what this binary will use on this machine:
// version, the instruction set the kernels run with, threads, whether io_uring
// and O_DIRECT reads work on the model's filesystem, the CUDA backend with the
// GPUs it sees and their free memory, and the memory plan the model would run
// under (engine/memory_plan.h: for --ram N, or for the memory available without
// it). Keys are stable; later sections add keys without renaming these.
#include <cstdio>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/memory_options.h"
#include "cluster/cluster.h"
#include "compute/devices.h"
#include "engine/engine.h"
#include "format/manifest.h"
#include "io/read_probe.h"
#include "kernels/isa.h"
#include "util/thread_pool.h"

namespace sluice::cli {
namespace {

struct InfoOpts {
  std::string model;
  bool json = false;
  MemoryRequest mem;
};

// A file of the model to read from: its first safetensors file, else config.json.
std::string probe_file(const std::string& dir) {
  std::string best;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string p = e.path().string();
    if (p.size() > 12 && p.compare(p.size() - 12, 12, ".safetensors") == 0 && (best.empty() || p < best)) best = p;
  }
  return best.empty() ? dir + "/config.json" : best;
}

std::string verdict(const ReadProbe& p) { return p.ok ? "yes" : "no (" + p.detail + ")"; }

int run_info(const InfoOpts& o) {
  apply_memory_options(o.mem);
  const std::string dir = model_or_default(o.model);
  const std::string file = probe_file(dir);
  const auto& isa = kernels::active_isa();
  const ReadProbe uring = probe_io_uring(file), direct = probe_o_direct(file);
  nlohmann::json compiled = nlohmann::json::array();
  for (const auto& k : kernels::compiled_isas())
    compiled.push_back({{"name", k.name}, {"supported", kernels::cpu_supports(k)}});
  nlohmann::json j = {
      {"version", SLUICE_VERSION},
      {"isa", isa.name},
      {"isa_compiled", compiled},
      {"threads", ThreadPool::global().size()},
      {"model", dir},
      {"io_uring", uring.ok},
      {"o_direct", direct.ok},
  };
  const CudaReport cuda = cuda_report();
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : cuda.devices)
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"free_bytes", g.free_bytes},
                    {"total_bytes", g.total_bytes},
                    {"compute_capability", fmt::format("{}.{}", g.cc_major, g.cc_minor)}});
  j["cuda"] = {{"compiled", cuda.compiled}, {"devices", gpus}};
  if (!cuda.error.empty()) j["cuda"]["error"] = cuda.error;
  // The files holding routed experts (packs where they were placed, else the shards), for
  // scripts that measure the drive under them (bench/prefill_ttft.sh runs fio over these).
  if (const auto man = find_manifest(dir)) {
    std::set<size_t> used;
    for (const auto& e : man->experts)
      for (const auto& x : e.extents) used.insert(size_t(x.file));
    nlohmann::json files = nlohmann::json::array();
    for (const size_t i : used) files.push_back(man->file_path(dir, i));
    j["expert_files"] = files;
  }
  // The plan run, chat, serve... would make: from the memory available without --ram.
  const MemoryPlan plan = Engine::plan(dir, o.mem);
  j["memory_plan"] = plan.to_json();
  // The ranks of an mpirun job (one without): where each runs and the plan for its share of the experts.
  Cluster* cluster = process_cluster();
  const nlohmann::json me = {{"rank", cluster ? cluster->rank() : 0},
                             {"host", cluster ? cluster->host() : std::string()},
                             {"isa", isa.name},
                             {"threads", ThreadPool::global().size()},
                             {"memory_plan", j["memory_plan"]}};
  j["ranks"] = nlohmann::json::array();
  for (const std::string& r : cluster ? cluster->gather(me.dump()) : std::vector<std::string>{me.dump()})
    j["ranks"].push_back(nlohmann::json::parse(r));
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("sluice %s\n", SLUICE_VERSION);
  std::printf("isa:      %s (compiled: %s; force one with SLUICE_ISA)\n", std::string(isa.name).c_str(),
              kernels::describe_isas().c_str());
  std::printf("threads:  %d\n", ThreadPool::global().size());
  std::printf("model:    %s\n", dir.c_str());
  std::printf("io_uring: %s\n", verdict(uring).c_str());
  std::printf("o_direct: %s (on %s)\n", verdict(direct).c_str(), file.c_str());
  if (!cuda.compiled) std::printf("cuda:     not compiled into this build\n");
  else if (cuda.devices.empty())
    std::printf("cuda:     compiled; no usable GPU%s%s\n", cuda.error.empty() ? "" : ": ", cuda.error.c_str());
  for (const auto& g : cuda.devices)
    std::printf("cuda:%d:   %s (sm_%d%d), %.2f GiB free of %.2f GiB\n", g.index, g.name.c_str(), g.cc_major, g.cc_minor,
                double(g.free_bytes) / double(1ull << 30), double(g.total_bytes) / double(1ull << 30));
  if (!plan.notice().empty()) std::printf("%s\n", plan.notice().c_str());
  std::printf("%s\n", plan.describe().c_str());
  return 0;
}

void add_info_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("info", "Show the version, the SIMD instruction set in use, threads, whether "
                                         "io_uring and O_DIRECT work on the model's filesystem, the GPUs, and the "
                                         "memory plan");
  auto o = std::make_shared<InfoOpts>();
  cmd->add_option("--model", o->model,
                  "Model directory whose filesystem is probed and whose memory plan is printed (default: the "
                  "shipped model)");
  cmd->add_flag("--json", o->json, "Print JSON (keys version, isa, threads, io_uring, o_direct, cuda, expert_files of a prepared model, memory_plan, ranks (one per rank under mpirun), ...)");
  add_plan_options(cmd, o->mem);
  cmd->get_option("--ram")->description(
      "Print the memory plan for this budget in GiB (spine, expert cache, state, reserve), as run, chat, generate, "
      "serve and bench would split it (default: the plan for the memory available now, as those commands make it "
      "without --ram; 0 or map: every weight mapped)");
  cmd->callback([o, &action] { action = [o] { return run_info(*o); }; });
}

}  // namespace
SLUICE_COMMAND(95, add_info_command);

}  // namespace sluice::cli
