// Routed experts computed on the host beside a GPU (`--experts-on cpu|auto`).
// A one-token expert product reads each weight once, so an expert whose
// weights are in host RAM (the mapped table, or the streaming reader's cache)
// is cheaper to compute there, at the host's DRAM rate, than to copy over PCIe
// first; a pass that gives an expert many rows (a prefill chunk) turns that
// around, and the copy wins. The MoE block asks this policy, per chosen
// expert, which side computes it: the host when the expert is not in the
// GPU's memory and has fewer rows in the pass than `max_rows`.
//
// The answer depends only on the expert, its row count and whether it is on
// the device, and the device set is fixed once loaded (experts/vram_tier.h
// freezes it in this mode), never on timing: the same pass gives the same bits
// every time, and a speculative verify pass computes each expert on the same
// side as one-token decoding does (as long as max_rows exceeds the verify
// pass's rows per expert).
#pragma once
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "compute/expert_source.h"

namespace sluice {

class Backend;

// From measured times of one expert on the host over increasing row counts ((rows, seconds),
// ascending rows) and the rate at which it would be copied to the GPU instead: the fewest of those
// rows at which the host takes longer than the copy (the copy's GPU product is much shorter),
// 0 when the host is faster at every count measured or no rate is known. `sluice bench --kernels
// --device cuda` prints it per format, as the measured ground for --host-expert-rows.
inline int64_t rows_where_copy_wins(const std::vector<std::pair<int64_t, double>>& host_seconds, uint64_t bytes,
                                    double copy_gbps) {
  if (!(copy_gbps > 0)) return 0;
  const double copy_s = double(bytes) / (copy_gbps * 1e9);
  for (const auto& [rows, s] : host_seconds)
    if (s > copy_s) return rows;
  return 0;
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
