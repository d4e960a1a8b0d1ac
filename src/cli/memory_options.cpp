#include "cli/memory_options.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "engine/expert_placement.h"
#include "util/checked_number.h"
#include "util/thread_pool.h"

namespace sluice::cli {

namespace {
const std::string kGroup = "Memory and streaming";

// --ram: "auto" (the default: plan from the memory available), "map" or 0 (no
// budget), or GiB. Errors are CLI11's, so they read like any other bad value.
std::optional<double> parse_ram(const std::string& s) {
  if (s == "auto") return std::nullopt;
  if (s == "map") return 0.0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !std::isfinite(v) || v < 0)
    throw CLI::ValidationError("--ram", "expected auto, map, 0 or a number of GiB, got '" + s + "'");
  try {
    checked_bytes(v, double(kGiB), "--ram");
  } catch (const Error& e) {
    throw CLI::ValidationError("--ram", std::string("expected auto, map, 0 or a number of GiB: ") + e.what());
  }
  return v;
}

// Without --ram the first line of output says what the plan made of the memory available.
void print_notice(const MemoryPlan& p) {
  const std::string line = p.notice();
  if (line.empty()) return;
  std::fprintf(stderr, "sluice: %s\n", line.c_str());
  std::fflush(stderr);
}

// On a GPU with --experts-on auto: what was measured and chosen, once per loaded model.
void print_placement(const ExpertPlacement& p) {
  const std::string line = p.describe();
  if (line.empty()) return;
  std::fprintf(stderr, "sluice: %s\n", line.c_str());
  std::fflush(stderr);
}
}  // namespace

void add_plan_options(CLI::App* cmd, MemoryRequest& r) {
  const std::string& group = kGroup;
  cmd->add_option_function<std::string>(
         "--ram", [&r](const std::string& s) { r.ram_gib = parse_ram(s); },
         "Memory budget in GiB for spine, expert cache, state and scratch; routed experts are streamed from disk "
         "within it, and the spine too when it does not fit. Default (auto): the memory available now (cgroup limit "
         "and MemAvailable) less a margin of a tenth (256 MiB to 2 GiB): a model that fits there is mapped, a larger "
         "one streamed within it. 0 or map: no budget, every weight mapped")
      ->type_name("GIB|auto|map")
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
  cmd->add_option("--experts-on", r.experts_on,
                  "GPU: where routed experts are computed. gpu: all on the GPU, copied into its VRAM expert cache; "
                  "cpu: all on the host from host memory (VRAM holds the spine); auto: a fixed set that fits in VRAM "
                  "on the GPU, the others on the host for passes that give them fewer than --host-expert-rows rows "
                  "(decoding), copied to the GPU otherwise (prefill). Without --host-expert-rows, auto times one of "
                  "the model's experts on the host at load (1 to 16 rows) against the pinned copy rate to the GPU, "
                  "with a 1.5x margin for the host's slowdown in the engine; where the host is slower even at one "
                  "row it runs exactly as gpu. One line on stderr says what it measured, how long that took and "
                  "what it chose. Measured on an H100 host (16 cores, "
                  "Kimi K3 MXFP4 experts of 17.5 MB, 2 layers, --vram 14, decode): gpu 170 tokens/s, cpu 71, auto "
                  "at 16 rows 90 (the host took 0.62 ms per 1-row expert, the copy 0.43 ms at 54.5 GB/s), so there "
                  "auto chooses gpu; a host with more cores and memory channels can choose otherwise. Which side "
                  "computes an expert depends on the expert and the pass, never on timing, once loaded")
      ->capture_default_str()
      ->group(group);
  cmd->add_option("--host-expert-rows", r.host_expert_rows,
                  "GPU, --experts-on auto: experts outside VRAM with fewer rows than this in a pass are computed on "
                  "the host. 0 (default): measured at load, so two runs may choose differently; give a number to "
                  "fix the placement across runs (keep it above --draft-max + 1 so speculation computes each expert "
                  "where plain decoding does)")
      ->capture_default_str()
      ->group(group);
}

void add_prefill_span_option(CLI::App* cmd, int64_t& span) {
  cmd->add_option("--prefill-span", span,
                  "Prompt tokens per layer-by-layer span (-1: the memory plan's, used when longer than a chunk; 0: chunk by "
                  "chunk). A span runs every layer over all its tokens before the next, attention in chunks: each "
                  "routed expert and streamed spine layer is read once per span instead of once per chunk, the same "
                  "logits. The plan's span holds its rows in the reserve and, on the CPU when the expert cache cannot "
                  "hold every expert, in cache slots beyond one layer's experts, lent for the span and given back "
                  "after (never beyond --ram); bench reports the spans and what was lent")
      ->check(CLI::Range(int64_t(-1), std::numeric_limits<int64_t>::max()).description(""))
      ->capture_default_str();
}

void add_memory_options(CLI::App* cmd, MemoryRequest& r) {
  const std::string& group = kGroup;
  add_plan_options(cmd, r);
  r.on_plan = print_notice;
  r.on_placement = print_placement;
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
  cmd->add_option("--prefetch-min-precision", r.prefetch_min_precision,
                  "Read a layer's predicted experts only while at least this share of its recent predictions was "
                  "right (every layer's predictions are scored, read or not); 0: always read them")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str()
      ->group(group);
  cmd->add_option("--prefetch-window", r.prefetch_window,
                  "Predicted reads in flight at most per drive (the rest wait, and those the router does not "
                  "choose are dropped); 0: all at once")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group(group);
  cmd->add_flag("--no-prefault", r.no_prefault,
                "Do not touch the expert cache's pages once at start-up (in the background); on VMs that charge "
                "the first user-space access to a page, the first read of each freshly filled slot then pays it")
      ->group(group);
}

void apply_memory_options(const MemoryRequest& r) {
  check_memory_request(r);
  if (r.threads > 0) ThreadPool::set_default_threads(int(r.threads));
}

}  // namespace sluice::cli
