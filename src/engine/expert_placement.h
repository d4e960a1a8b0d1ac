// Beside a GPU, which side computes the routed experts, decided once per loaded
// engine (--experts-on, memory_plan.h ExpertsOn). gpu and cpu are what they
// say. auto with --host-expert-rows N computes experts outside the frozen VRAM
// set on the host for passes that give them fewer than N rows. auto without it
// measures at load, on this machine and this model: one of its routed experts
// on the host's CPU backend (its own format and shape, the engine's threads)
// at 1, 2, 4, 8 and 16 rows (stopping once decided), and the pinned host ->
// device copy rate, and takes compute/host_experts.h host_expert_max_rows of them. When the host is
// slower than the copy even at one row, auto runs exactly as gpu (the evicting
// VRAM cache, nothing on the host), so it cannot be slower than gpu.
//
// The measurement is timing, so two runs may decide differently; within one
// process the decision is fixed, and each pass's placement is a function of its
// requests only (compute/host_experts.h). --host-expert-rows pins it across runs.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/expert_source.h"
#include "engine/memory_plan.h"

namespace sluice {

class Backend;
struct HostExperts;

// The factor on the measured host time per expert. Measured on an H100 host (16 cores; Kimi K3 MXFP4
// experts of 17.5 MB): bench --kernels timed a 1-row expert at 0.41 ms, the decode spent 0.62 ms per
// 1-row host expert (1.5x): in the engine the host's calls come one after another with the gather,
// the copy of outputs to the GPU and the GPU's own work on the same memory, where the timing has the
// machine to itself.
inline constexpr double kHostExpertMargin = 1.5;

// What auto measured at load.
struct HostExpertMeasurement {
  std::string format;  // the expert's weight format (weight_format_name)
  uint64_t bytes = 0;  // its stored bytes
  int threads = 0;     // the host's worker threads
  std::vector<std::pair<int64_t, double>> host_seconds;  // (rows, best seconds per call), up to the deciding count
  double copy_gbps = 0;  // pinned host -> device (compute/devices.h pinned_upload_gbps)
  double seconds = 0;    // what measuring took
};

// The pinned upload rate to `device` (64 MiB, 5 times), then the expert of `w` on the CPU backend at 1,
// 2, 4, 8 and 16 rows (best of 3 after a warm-up, on copies that together exceed twice the last-level
// cache), stopping at the first count where the copy wins with `margin` (host_expert_max_rows is then
// decided). Its cost, estimated from bench --kernels on the H100 host (MXFP4 expert: 0.41 ms at 1 row,
// the copy wins from there): copying ~2x the cache, pinning and uploading 64 MiB, a few 1-row calls:
// well under 0.1 s; where the host wins up to 16 rows, ~30 ms more of products. On a 2-core VM (32 MiB
// cache) a K2-sized MXFP4 expert took 0.45-0.6 s through all five counts. HostExpertMeasurement::seconds
// records what it took.
HostExpertMeasurement measure_host_expert(const ExpertWeights& w, Backend& device, double margin);

struct ExpertPlacement {
  ExpertsOn asked = ExpertsOn::Gpu;  // --experts-on
  ExpertsOn runs = ExpertsOn::Gpu;   // what the engine does (auto: Gpu when the host is never faster)
  // Auto: experts outside the VRAM set with fewer rows than this in a pass are computed on the host.
  int64_t host_max_rows = 0;
  bool rows_given = false;                         // --host-expert-rows
  std::optional<HostExpertMeasurement> measured;  // auto without --host-expert-rows
  double margin = kHostExpertMargin;

  // The VRAM tier is a fixed set (experts/vram_tier.h) only beside host-computed experts.
  bool vram_fixed() const { return runs == ExpertsOn::Auto; }
  // The policy the MoE blocks ask (null: every expert on the GPU).
  std::shared_ptr<HostExperts> host_experts(Backend& host) const;
  // One line: what was measured and what was chosen (empty for gpu and cpu, which choose nothing).
  std::string describe() const;
  // bench JSON's "expert_placement" inputs: asked, runs, host_max_rows, and what was measured.
  nlohmann::json to_json() const;
};

// The decision: `rows` is --host-expert-rows (0: not given), `m` the measurement (auto without rows).
ExpertPlacement place_experts(ExpertsOn asked, int64_t rows, const HostExpertMeasurement* m);

}  // namespace sluice
