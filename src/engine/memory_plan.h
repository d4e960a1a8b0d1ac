// One memory plan for every command. `--ram N` is the whole budget in GiB:
// the resident spine (or the memory a streamed spine may use), the routed-
// expert cache, per-sequence state (KV / latent caches, recurrent state) and a
// reserve for activations and scratch. plan_memory() is the one place the
// budget is split; `--stats` and `sluice info --model DIR --ram N` print it.
// The plan also says which device computes; on a GPU the spine, state and a
// VRAM expert cache live in its memory (plan_vram()).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "util/available_memory.h"

namespace sluice {

struct LoadOptions;
struct MemoryPlan;
struct ExpertPlacement;

enum class DeviceKind { Cpu, Cuda };
struct Device {
  DeviceKind kind = DeviceKind::Cpu;
  int index = 0;
  bool cuda() const { return kind == DeviceKind::Cuda; }
  std::string name() const;  // "cpu", "cuda:0"
};
// "cpu", "cuda", "cuda:N", or "auto" (the first GPU when this build and machine
// have one, else the CPU); errors name the value.
Device parse_device(const std::string& s);

// Beside a GPU, which side computes the routed experts (compute/host_experts.h,
// engine/expert_placement.h):
// Gpu: every expert, copied into the VRAM expert cache (least recently used);
// Cpu: every expert on the host, from host memory (VRAM holds the spine);
// Auto: a fixed set in VRAM computed there, the others on the host for passes that
// give them fewer than LoadOptions::host_expert_rows rows (given, or measured at
// load), copied in otherwise; exactly Gpu when the host is never faster.
enum class ExpertsOn { Gpu, Cpu, Auto };
// "gpu", "cpu" or "auto"; errors name the value.
ExpertsOn parse_experts_on(const std::string& s);

// What the user asked for: the memory and streaming option group shared by
// run, chat, generate, serve, bench, logits and routing-report.
struct MemoryRequest {
  // Total budget in GiB; 0: no budget (weights mapped, nothing streamed); unset
  // (no --ram): planned from the memory available now (plan_available).
  std::optional<double> ram_gib;
  std::string policy = "lru";  // expert cache policy: lru | lfu | heat
  std::string heat_file;       // heat: counts file (default MODEL/sluice-expert-heat.txt)
  std::string queue = "auto";  // reader: auto | uring | threads
  int queue_depth = 128;
  int64_t read_kb = 1024;      // largest single read, KiB
  bool buffered = false;       // page cache instead of O_DIRECT
  bool no_prefetch = false;    // do not predict the next layer's experts
  double prefetch_min_precision = 0.5;  // StreamingOptions::prefetch_min_precision
  int prefetch_window = 32;             // StreamingOptions::prefetch_window_reads
  bool no_prefault = false;    // do not touch the expert cache's pages at start-up (StreamingOptions::prefault)
  int64_t threads = 0;         // worker threads (0: one per hardware thread)
  std::string device = "auto";
  double vram_gib = 0;         // GPU: bytes of device memory sluice may use in GiB; 0: free memory minus a margin
  std::string experts_on = "auto";  // GPU: gpu | cpu | auto (ExpertsOn)
  int64_t host_expert_rows = 0;     // GPU, auto: LoadOptions::host_expert_rows (0: measured at load)
  // Positions the per-sequence state is planned for (0: 4096, at most the
  // model's context); commands that know their length (run, generate, bench) set it.
  int64_t context_tokens = 0;
  // serve without --context-length: plan the largest context the memory holds
  // (fitting_context), not context_tokens.
  bool fit_context = false;
  // Sequences decoded together (bench --batch, serve --parallel): each has its own state.
  int64_t sequences = 1;
  // Called with the plan once it is made, before any weight is read (the CLI
  // prints MemoryPlan::notice() there, so it is the first line of output).
  std::function<void(const MemoryPlan&)> on_plan;
  // Called on a GPU with the engine's choice of where routed experts are computed, once it is
  // made (the CLI prints ExpertPlacement::describe()).
  std::function<void(const ExpertPlacement&)> on_placement;
};
// Throws naming the option when a value is out of range.
void check_memory_request(const MemoryRequest& r);

// What a model needs, known once its decoder is built (no weights read).
struct ModelFootprint {
  uint64_t spine_bytes = 0;          // non-routed-expert weights the model uses
  // Of those, bytes read on demand through the page cache instead of held in
  // the budget: the embedding table, of which a token reads one row.
  uint64_t spine_on_demand_bytes = 0;
  uint64_t spine_stream_min_bytes = 0;  // a streamed spine needs this much: head and norms plus the largest layer
  uint64_t expert_bytes = 0;         // all routed experts
  uint64_t largest_expert_bytes = 0;
  uint64_t state_bytes_per_token = 0;  // KV / latent cache rows, all layers
  uint64_t state_bytes_fixed = 0;      // recurrent state, all layers
  int64_t context_tokens = 0;          // positions the state is planned for, per sequence
  int64_t context_max = 0;             // the model's positions (max_position_embeddings; 0: not stated)
  int64_t sequences = 1;               // sequences with their own state
};

// Where the budget came from: --ram 0 (none: everything mapped), --ram N, or
// the memory available when no --ram was given.
enum class BudgetSource { None, Given, Available };

struct MemoryPlan {
  Device device;
  BudgetSource source = BudgetSource::None;
  // BudgetSource::Available: what was measured, the margin kept back from it,
  // and what mapping every weight would take (compared with what is left).
  AvailableMemory available;
  uint64_t margin = 0;
  uint64_t mapped_needs = 0;
  uint64_t vram_budget = 0;        // GPU: device memory sluice may use (spine, state, expert cache, scratch)
  bool vram_budget_given = false;  // --vram (else the free memory)
  uint64_t vram_spine = 0;         // GPU: weights the model placed in device memory
  uint64_t vram_expert_cache = 0;  // GPU: routed experts kept in device memory
  uint64_t budget = 0;        // the whole budget; 0: none (everything mapped, nothing streamed)
  uint64_t reserve = 0;       // activations and scratch
  uint64_t state = 0;         // per-sequence state for footprint.context_tokens positions
  uint64_t spine = 0;         // spine bytes of the model
  uint64_t spine_on_demand = 0;  // of those, read on demand (not held in the budget)
  bool stream_spine = false;  // the spine does not fit: it is read layer by layer within spine_budget
  uint64_t spine_budget = 0;  // memory the streamed spine may use (resident layers + read-ahead)
  bool stream_experts = false;
  uint64_t expert_cache = 0;  // routed-expert cache
  ModelFootprint footprint;
  std::string describe() const;  // one line per part, for --stats and `sluice info`
  // Without --ram: one line saying whether the model fits in the memory
  // available (mapped as with --ram 0) or is streamed within it, and how to
  // change that; empty when a --ram was given.
  std::string notice() const;
  nlohmann::json to_json() const;  // the same in bytes (`sluice info --json`, bench JSON)
};

// The split rule. Reserve: a tenth of the budget, between 768 MiB and 2 GiB,
// and never more than a fifth (it bounds the prefill chunk, Engine::prefill_chunk:
// a bigger budget reads the expert pool once for a longer prompt). State: the
// footprint's state for its context. The spine (less its on-demand bytes)
// stays resident when it and both of those take at most three quarters of the
// budget and the cache gets
// the rest; otherwise the spine is streamed within three quarters of what is
// left after reserve and state (at least what streaming needs), and the cache
// gets the rest. Throws when the budget cannot hold the reserve and state, or
// the cache not one expert.
MemoryPlan plan_memory(uint64_t budget_bytes, const ModelFootprint& f, Device device = {},
                       BudgetSource source = BudgetSource::Given);

// Kept back from the memory available when planning without --ram, for what
// the plan does not count (the binary, tokenizer, thread stacks, the GPU
// runtime, other programs' growth): a tenth, between 256 MiB and 2 GiB.
uint64_t available_margin(uint64_t available);

// The plan without --ram. `available` less the margin is the budget: a model
// whose every weight, its state and a mapped run's reserve (kMappedReserve, or
// the budget's reserve when smaller) fit in it is mapped as with --ram 0
// (nothing streamed); a larger one is planned as --ram with that budget
// (plan_memory). Throws, saying what to do, when that budget cannot run it.
MemoryPlan plan_available(const AvailableMemory& available, const ModelFootprint& f, Device device = {});

// The VRAM expert cache on a GPU: what is left of `budget` (--vram, or the
// free memory when 0) after the resident spine, the state and a scratch
// reserve (a tenth of the budget, between 512 MiB and 4 GiB), rounded down to
// whole experts. Zero when not one expert fits (experts then cross for each
// use). `free` is the device's free memory after the spine was placed.
uint64_t plan_vram_expert_cache(uint64_t budget, uint64_t free, uint64_t spine_on_device, uint64_t state,
                                uint64_t largest_expert);

// The positions per sequence a server can hold when no --context-length is
// given. `bare` is the model's plan with state for 0 positions (its fixed
// state only). The room for the state of every sequence:
//  - with a budget (experts streamed): half of what the reserve, the fixed
//    state and the spine (resident, or the least a streamed one needs) leave,
//    the other half staying the expert cache's, and no more than keeps a
//    resident spine resident;
//  - mapped: what `available` less its margin leaves after every weight, the
//    fixed state and a mapped run's reserve (unknown memory: no bound).
// The context is that room over bare.footprint.sequences and the state bytes
// per token, rounded down to a multiple of 1024, at most max_positions (the
// model's; 0: not stated) and at least min(4096, max_positions) (the plan then
// says when even that does not fit).
int64_t fitting_context(const MemoryPlan& bare, const AvailableMemory& available, int64_t max_positions);
// The smallest context fitting_context chooses (or the model's, when smaller).
constexpr int64_t kMinFittingContext = 4096;

// The engine options that carry out `plan` with the streaming knobs of `r`.
LoadOptions load_options(const MemoryPlan& plan, const MemoryRequest& r, const std::string& model_dir);

constexpr uint64_t kGiB = 1ull << 30;
// Activations and scratch of a run whose weights are all mapped (no budget):
// Engine::prefill_chunk sizes chunks to three quarters of it.
constexpr uint64_t kMappedReserve = 768ull << 20;

}  // namespace sluice
