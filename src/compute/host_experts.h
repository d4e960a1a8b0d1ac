// Routed experts computed on the host beside a GPU (`--experts-on cpu|auto`).
// A one-token expert product reads each weight once, so an expert whose
// weights are in host RAM (the mapped table, or the streaming reader's cache)
// can be cheaper to compute there, at the host's DRAM rate, than to copy over
// PCIe first (a host with many cores and memory channels; on others the copy
// wins even at one row); a pass that gives an expert many rows (a prefill
// chunk) turns that around, and the copy wins. The MoE block asks this policy,
// per chosen expert, which side computes it: the host when the expert is not
// in the GPU's memory and has fewer rows in the pass than `max_rows`.
//
// The answer depends only on the expert, its row count and whether it is on
// the device, and the device set is fixed once loaded (experts/vram_tier.h
// freezes it in this mode), never on timing: max_rows is fixed once per loaded
// engine (given, or measured at load: engine/expert_placement.h), so within a
// process the same pass gives the same bits every time, and a speculative
// verify pass computes each expert on the same side as one-token decoding
// does (as long as max_rows exceeds the verify pass's rows per expert).
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "compute/expert_source.h"

namespace sluice {

class Backend;

// --experts-on auto's one decision beside a GPU: HostExperts::max_rows from one expert timed on the
// host over ascending row counts ((rows, seconds per call), the first count 1) and the rate it would
// be copied to the GPU at instead (pinned host -> device, GB/s). The host's times are multiplied by
// `margin` (what the engine runs costs the host more than the timing alone: engine/expert_placement.h
// says how much and why). The answer is the fewest measured rows at which the host is slower than the
// copy (the copied expert's GPU product, a few microseconds at the GPU's memory rate, is left out), or
// one past the last count when the host is faster at every one (nothing is known beyond it). 1 means
// nothing on the host: the host is slower even at one row, or an input is unusable (no or a non-finite
// copy rate, no bytes, a margin that is not a positive number, no time for one row, a time that is not
// a positive number: the copy is taken to win from there), because every expert on the GPU is the
// side auto must never be slower than. `sluice bench --kernels --device cuda` prints it at margin 1.
inline int64_t host_expert_max_rows(const std::vector<std::pair<int64_t, double>>& host_seconds, uint64_t bytes,
                                    double copy_gbps, double margin) {
  if (!(copy_gbps > 0) || !std::isfinite(copy_gbps) || !(margin > 0) || !std::isfinite(margin) || bytes == 0 ||
      host_seconds.empty() || host_seconds.front().first != 1)
    return 1;
  const double copy_s = double(bytes) / (copy_gbps * 1e9);
  for (const auto& [rows, s] : host_seconds)
    if (!(s > 0) || !std::isfinite(s) || s * margin > copy_s) return rows;
  return host_seconds.back().first + 1;
}

struct HostExperts {
  Backend* backend = nullptr;  // the host's backend (the CPU's)
  // Fewer rows than this in one pass: computed on the host (unless on the device).
  int64_t max_rows = std::numeric_limits<int64_t>::max();

  bool on_host(const ExpertSource& src, int32_t layer, int32_t expert, int64_t rows) const {
    return rows < max_rows && !src.on_device(layer, expert);
  }

  // Counters: expert calls (one expert over its rows in one pass) on each side, and the
  // host's time in them (which overlaps the GPU's work on the others).
  uint64_t host_calls = 0, device_calls = 0;
  double host_seconds = 0;
};

}  // namespace sluice
