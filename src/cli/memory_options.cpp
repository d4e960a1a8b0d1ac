#include "cli/memory_options.h"

#include "util/thread_pool.h"

namespace sluice::cli {

namespace {
const std::string kGroup = "Memory and streaming";
}  // namespace

void add_plan_options(CLI::App* cmd, MemoryRequest& r) {
  const std::string& group = kGroup;
  cmd->add_option("--ram", r.ram_gib,
                  "Memory budget in GiB for spine, expert cache, state and scratch; routed experts are streamed from "
                  "disk within it, and the spine too when it does not fit (default: no budget, everything mapped)")
      ->group(group);
  cmd->add_option("--threads", r.threads, "Worker threads (default: one per hardware thread)")->group(group);
  cmd->add_option("--device", r.device,
                  "Where to compute: cpu, cuda[:N], or auto (the first GPU when this build and machine have one)")
      ->capture_default_str()
      ->group(group);
  cmd->add_option("--vram", r.vram_gib,
                  "GPU memory budget in GiB for spine, state, scratch and the VRAM expert cache (default: free GPU "
                  "memory minus a margin)")
      ->group(group);
}

void add_memory_options(CLI::App* cmd, MemoryRequest& r) {
  const std::string& group = kGroup;
  add_plan_options(cmd, r);
  cmd->add_option("--policy", r.policy, "Expert cache policy: lru, lfu or heat (use counts kept across runs)")
      ->capture_default_str()
      ->group(group);
  cmd->add_option("--heat-file", r.heat_file, "heat policy: counts file (default MODEL/sluice-expert-heat.txt)")
      ->group(group);
  cmd->add_option("--queue", r.queue, "Expert reader: auto, uring or threads")->capture_default_str()->group(group);
  cmd->add_option("--queue-depth", r.queue_depth, "Reads in flight at most, per drive (each directory of checkpoint files or expert packs)")->capture_default_str()->group(group);
  cmd->add_option("--read-kb", r.read_kb, "Size of each read in KiB (experts are split into reads of this size)")
      ->capture_default_str()
      ->group(group);
  cmd->add_flag("--buffered", r.buffered, "Read through the page cache instead of O_DIRECT")->group(group);
  cmd->add_flag("--no-prefetch", r.no_prefetch, "Do not predict the next layer's experts")->group(group);
}

void apply_memory_options(const MemoryRequest& r) {
  check_memory_request(r);
  if (r.threads > 0) ThreadPool::set_default_threads(int(r.threads));
}

}  // namespace sluice::cli
