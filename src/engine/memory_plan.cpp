#include "engine/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "compute/devices.h"
#include "engine/engine.h"
#include "experts/expert_slot_table.h"
#include "util/error.h"
#include "util/checked_number.h"
#include "util/progress.h"

namespace sluice {

namespace {
// The plan's unit is the GiB (--ram); smaller parts in MiB / KiB.
std::string gib(uint64_t b) { return binary_bytes(b); }

// Activations and scratch: a tenth of the budget, between 768 MiB and 2 GiB, at most a fifth.
uint64_t reserve_for(uint64_t budget) {
  return std::min<uint64_t>(budget / 5, std::clamp<uint64_t>(budget / 10, 768ull << 20, 2 * kGiB));
}

// How the plan's errors name the budget.
std::string budget_name(uint64_t budget, BudgetSource source) {
  if (source == BudgetSource::Available) return fmt::format("the memory available ({})", gib(budget));
  return fmt::format("--ram {}", gib(budget));
}
}  // namespace

std::string Device::name() const { return cuda() ? fmt::format("cuda:{}", index) : "cpu"; }

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device{};
  if (s == "auto") {
    const CudaReport r = cuda_report();
    return r.devices.empty() ? Device{} : Device{DeviceKind::Cuda, 0};
  }
  if (s == "cuda" || s.rfind("cuda:", 0) == 0) {
    Device d{DeviceKind::Cuda, 0};
    if (s.size() > 5) {
      const std::string n = s.substr(5);
      if (n.empty() || n.size() > 3 || n.find_first_not_of("0123456789") != std::string::npos)
        fail("--device '{}': expected cuda:N with N a device number", s);
      d.index = std::stoi(n);
    }
    const CudaReport r = cuda_report();
    if (!r.compiled) fail("--device '{}': this build has no CUDA backend (rebuild with nvcc installed)", s);
    if (d.index >= int(r.devices.size()))
      fail("--device '{}': {} ({} CUDA device(s) found{}{})", s, r.devices.empty() ? "no usable GPU" : "no such GPU",
           r.devices.size(), r.error.empty() ? "" : ": ", r.error);
    return d;
  }
  fail("--device must be cpu, cuda, cuda:N or auto, got '{}'", s);
}

uint64_t plan_vram_expert_cache(uint64_t budget, uint64_t free, uint64_t spine_on_device, uint64_t state,
                                uint64_t largest_expert) {
  // Without --vram the budget is what is free now plus what the spine already took.
  const uint64_t total = budget > 0 ? budget : free + spine_on_device;
  const uint64_t reserve = std::clamp<uint64_t>(total / 10, 512ull << 20, 4 * kGiB);
  if (largest_expert == 0 || total <= spine_on_device + state + reserve || free <= state + reserve) return 0;
  const uint64_t cache = std::min(total - spine_on_device - state - reserve, free - state - reserve);
  return cache / largest_expert * largest_expert;
}

ExpertsOn parse_experts_on(const std::string& s) {
  if (s == "gpu") return ExpertsOn::Gpu;
  if (s == "cpu") return ExpertsOn::Cpu;
  if (s == "auto") return ExpertsOn::Auto;
  fail("--experts-on must be gpu, cpu or auto, got '{}'", s);
}

void check_memory_request(const MemoryRequest& r) {
  if (!(r.vram_gib >= 0) || !std::isfinite(r.vram_gib)) fail("--vram must be a positive number of GiB, got {}", r.vram_gib);
  checked_bytes(r.vram_gib, double(kGiB), "--vram (GiB)");
  if (r.ram_gib && *r.ram_gib >= 0) checked_bytes(*r.ram_gib, double(kGiB), "--ram (GiB)");
  if (r.ram_gib && (!(*r.ram_gib >= 0) || !std::isfinite(*r.ram_gib)))
    fail("--ram must be a positive number of GiB (0: no budget, every weight mapped), got {}", *r.ram_gib);
  if (!eviction_policy_from(r.policy))
    fail("--policy must be lru, lfu or heat, got '{}'", r.policy);
  if (r.queue != "auto" && r.queue != "uring" && r.queue != "threads")
    fail("--queue must be auto, uring or threads, got '{}'", r.queue);
  if (r.queue_depth < 1) fail("--queue-depth must be >= 1, got {}", r.queue_depth);
  if (r.read_kb < 4 || r.read_kb % 4 || r.read_kb > (1 << 20))
    fail("--read-kb must be a multiple of 4 between 4 and 1048576, got {}", r.read_kb);
  if (r.sequences < 1) fail("the number of sequences decoded together must be >= 1, got {}", r.sequences);
  if (r.threads < 0) fail("--threads must be >= 1 (or 0: one per hardware thread), got {}", r.threads);
  parse_device(r.device);
  parse_experts_on(r.experts_on);
  if (r.host_expert_rows < 0)
    fail("--host-expert-rows must be >= 1 (or 0: measured at load), got {}", r.host_expert_rows);
}

MemoryPlan plan_memory(uint64_t budget, const ModelFootprint& f, Device device, BudgetSource source) {
  MemoryPlan p;
  p.device = device;
  p.source = budget == 0 ? BudgetSource::None : source;
  p.budget = budget;
  p.footprint = f;
  p.spine = f.spine_bytes;
  p.spine_on_demand = std::min(f.spine_on_demand_bytes, f.spine_bytes);
  p.state = (f.state_bytes_fixed + f.state_bytes_per_token * uint64_t(std::max<int64_t>(0, f.context_tokens))) *
            uint64_t(std::max<int64_t>(1, f.sequences));
  if (budget == 0) return p;  // no budget: everything mapped, nothing streamed
  p.stream_experts = true;
  p.reserve = reserve_for(budget);
  const uint64_t fixed = p.reserve + p.state;
  if (fixed >= budget)
    fail("{} leaves nothing after {} of working memory ({} reserve, {} state for {} positions{})",
         budget_name(budget, source), gib(fixed), gib(p.reserve), gib(p.state), f.context_tokens,
         f.sequences > 1 ? fmt::format(" in each of {} sequences", f.sequences) : std::string());
  const uint64_t held = p.spine - p.spine_on_demand;  // what a resident spine keeps in memory
  if (held + fixed <= budget / 4 * 3) {
    p.expert_cache = budget - held - fixed;
  } else {
    // A spine that would leave less than a quarter of the budget to the expert
    // cache is streamed layer by layer within three quarters of the rest.
    p.stream_spine = true;
    p.spine_budget = std::max((budget - fixed) / 4 * 3, f.spine_stream_min_bytes);
    if (fixed + p.spine_budget >= budget)
      fail("{} is too small: streaming the spine needs {} (head and norms plus the largest layer) next to "
           "{} of working memory",
           budget_name(budget, source), gib(f.spine_stream_min_bytes), gib(fixed));
    p.expert_cache = budget - fixed - p.spine_budget;
  }
  if (p.expert_cache < f.largest_expert_bytes)
    fail("{} leaves {} for the expert cache, less than one routed expert ({})", budget_name(budget, source),
         gib(p.expert_cache), gib(f.largest_expert_bytes));
  return p;
}

uint64_t available_margin(uint64_t available) {
  return std::clamp<uint64_t>(available / 10, 256ull << 20, 2 * kGiB);
}

MemoryPlan plan_available(const AvailableMemory& available, const ModelFootprint& f, Device device) {
  MemoryPlan p;
  if (available.bytes == 0) {
    // Nothing to plan from (no /proc/meminfo): as before budgets existed.
    p = plan_memory(0, f, device);
  } else {
    const uint64_t margin = available_margin(available.bytes);
    if (available.bytes <= margin)
      fail("only {} of memory is available ({}), not more than the {} margin kept for the rest of the process: "
           "free memory, or give a budget with --ram GIB (--ram 0 maps every weight and leaves paging to the kernel)",
           gib(available.bytes), available.describe(), gib(margin));
    const uint64_t budget = available.bytes - margin;
    const MemoryPlan mapped = plan_memory(0, f, device);
    // A mapped run's activations: what it takes without a budget, or less in a small one.
    const uint64_t reserve = std::min(kMappedReserve, reserve_for(budget));
    const uint64_t needs = f.spine_bytes + f.expert_bytes + mapped.state + reserve;
    if (needs <= budget) {
      p = mapped;
      p.reserve = reserve;  // bounds the prefill chunk (Engine::prefill_chunk)
    } else {
      try {
        p = plan_memory(budget, f, device, BudgetSource::Available);
      } catch (const Error& e) {
        fail("{} ({} less a {} margin): give a budget that holds it with --ram GIB, or --ram 0 to map every "
             "weight and leave paging to the kernel",
             e.what(), available.describe(), gib(margin));
      }
    }
    p.margin = margin;
    p.mapped_needs = needs;
  }
  p.source = BudgetSource::Available;
  p.available = available;
  return p;
}

int64_t fitting_context(const MemoryPlan& bare, const AvailableMemory& available, int64_t max_positions) {
  const ModelFootprint& f = bare.footprint;
  const uint64_t fixed = bare.state;  // the fixed state of every sequence
  uint64_t room = std::numeric_limits<uint64_t>::max();
  if (bare.budget > 0) {
    const uint64_t spine = bare.stream_spine ? f.spine_stream_min_bytes : bare.spine - bare.spine_on_demand;
    const uint64_t used = bare.reserve + fixed + spine;
    room = used >= bare.budget ? 0 : (bare.budget - used) / 2;
    if (!bare.stream_spine) room = std::min(room, bare.budget / 4 * 3 > used ? bare.budget / 4 * 3 - used : 0);
  } else if (available.bytes > 0) {
    const uint64_t margin = available_margin(available.bytes);
    const uint64_t budget = available.bytes > margin ? available.bytes - margin : 0;
    const uint64_t needs = f.spine_bytes + f.expert_bytes + fixed + std::min(kMappedReserve, reserve_for(budget));
    room = needs >= budget ? 0 : budget - needs;
  }
  int64_t ctx = max_positions > 0 ? max_positions : std::numeric_limits<int64_t>::max();
  if (f.state_bytes_per_token > 0 && room != std::numeric_limits<uint64_t>::max()) {
    const uint64_t per_sequence = room / uint64_t(std::max<int64_t>(1, f.sequences));
    const uint64_t fits = per_sequence / f.state_bytes_per_token;
    if (fits < uint64_t(ctx)) ctx = int64_t(fits) / 1024 * 1024;
  }
  const int64_t floor = max_positions > 0 ? std::min(kMinFittingContext, max_positions) : kMinFittingContext;
  if (ctx == std::numeric_limits<int64_t>::max()) return 0;  // nothing bounds it: no context to choose
  return std::max(ctx, floor);
}

std::string MemoryPlan::describe() const {
  std::string vram;
  if (device.cuda())
    vram = fmt::format("\n  VRAM on {}  {} ({}): spine {} resident, expert cache {}", device.name(),
                       gib(vram_budget), vram_budget_given ? "--vram" : "free memory", gib(vram_spine), gib(vram_expert_cache));
  if (budget == 0)
    return fmt::format("memory plan on {}: {}: weights mapped (spine {}, routed experts {}), nothing "
                       "streamed; state {} for {} positions",
                       device.name(),
                       source == BudgetSource::Available
                           ? (available.bytes > 0 ? fmt::format("fits in the {} available less a {} margin",
                                                                gib(available.bytes), gib(margin))
                                                  : std::string("available memory unknown"))
                           : std::string("no --ram budget"),
                       gib(spine), gib(footprint.expert_bytes), gib(state), footprint.context_tokens) +
           vram;
  std::string s =
      source == BudgetSource::Available
          ? fmt::format("memory plan for the {} available less a {} margin ({}) on {}:\n", gib(available.bytes),
                        gib(margin), gib(budget), device.name())
          : fmt::format("memory plan for --ram {} on {}:\n", gib(budget), device.name());
  if (stream_spine)
    s += fmt::format("  spine         {} of {} (streamed layer by layer)\n", gib(spine_budget), gib(spine - spine_on_demand));
  else
    s += fmt::format("  spine         {} (resident)\n", gib(spine - spine_on_demand));
  if (spine_on_demand > 0)
    s += fmt::format("                + {} embedding table read on demand (page cache, one row per token)\n",
                     gib(spine_on_demand));
  s += fmt::format("  expert cache  {} (routed experts {} on disk, largest {})\n", gib(expert_cache),
                   gib(footprint.expert_bytes), gib(footprint.largest_expert_bytes));
  if (footprint.sequences > 1)
    s += fmt::format("  state         {} ({} sequences: KV / latent caches for {} positions each, recurrent state)\n",
                     gib(state), footprint.sequences, footprint.context_tokens);
  else
    s += fmt::format("  state         {} (KV / latent caches for {} positions, recurrent state)\n", gib(state),
                     footprint.context_tokens);
  s += fmt::format("  reserve       {} (activations, scratch)", gib(reserve));
  return s + vram;
}

std::string MemoryPlan::notice() const {
  if (source != BudgetSource::Available) return "";
  const std::string what = fmt::format("{} of weights", gib(spine + footprint.expert_bytes));
  if (available.bytes == 0)
    return fmt::format("memory: the available memory could not be read ({}): {} mapped, nothing streamed; "
                       "--ram GIB streams within a budget",
                       available.describe(), what);
  const std::string avail = fmt::format("{} ({} available: {}; less a {} margin)", gib(available.bytes - margin),
                                        gib(available.bytes), available.describe(), gib(margin));
  if (budget == 0)
    return fmt::format("memory: the model ({}, {} with state and scratch) fits in {}: weights mapped, nothing "
                       "streamed; --ram GIB streams within a budget instead",
                       what, gib(mapped_needs), avail);
  return fmt::format("memory: the model ({}, {} with state and scratch) does not fit in {}: routed experts{} "
                     "streamed from disk within {}; --ram GIB sets another budget, --ram 0 maps every weight",
                     what, gib(mapped_needs), avail, stream_spine ? " and the spine" : "", gib(budget));
}

nlohmann::json MemoryPlan::to_json() const {
  return {{"device", device.name()},
          {"budget_source", source == BudgetSource::Available ? "available"
                            : source == BudgetSource::Given   ? "ram"
                                                              : "none"},
          {"available_bytes", available.bytes},
          {"margin_bytes", margin},
          {"budget_bytes", budget},
          {"reserve_bytes", reserve},
          {"state_bytes", state},
          {"state_positions", footprint.context_tokens},
          {"state_sequences", footprint.sequences},
          {"spine_bytes", spine},
          {"spine_on_demand_bytes", spine_on_demand},
          {"stream_spine", stream_spine},
          {"spine_budget_bytes", spine_budget},
          {"stream_experts", stream_experts},
          {"expert_cache_bytes", expert_cache},
          {"routed_expert_bytes", footprint.expert_bytes},
          {"largest_expert_bytes", footprint.largest_expert_bytes},
          {"vram_budget_bytes", vram_budget},
          {"vram_spine_bytes", vram_spine},
          {"vram_expert_cache_bytes", vram_expert_cache}};
}

LoadOptions load_options(const MemoryPlan& plan, const MemoryRequest& r, const std::string& model_dir) {
  LoadOptions lo;
  lo.device = plan.device;
  lo.vram_budget = checked_bytes(r.vram_gib, double(kGiB), "--vram (GiB)");
  lo.experts_on = parse_experts_on(r.experts_on);
  lo.host_expert_rows = r.host_expert_rows;
  lo.stream_experts = plan.stream_experts;
  lo.prefetch = plan.stream_experts && !r.no_prefetch;
  lo.spine_budget = plan.stream_spine ? plan.spine_budget : 0;
  StreamingOptions& so = lo.streaming;
  if (plan.stream_experts) so.cache_bytes = plan.expert_cache;
  so.policy = r.policy;
  so.heat_file = r.heat_file.empty() ? model_dir + "/sluice-expert-heat.txt" : r.heat_file;
  so.direct = !r.buffered;
  so.queue = r.queue == "uring" ? ReadQueue::Kind::IoUring
             : r.queue == "threads" ? ReadQueue::Kind::Threads
                                    : ReadQueue::Kind::Auto;
  so.queue_depth = r.queue_depth;
  so.chunk_bytes = uint32_t(r.read_kb * 1024);
  so.prefault = !r.no_prefault;
  so.prefetch_min_precision = r.prefetch_min_precision;
  so.prefetch_window_reads = r.prefetch_window;
  return lo;
}

}  // namespace sluice
