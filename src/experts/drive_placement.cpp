#include "experts/drive_placement.h"

#include <algorithm>
#include <numeric>

#include "util/error.h"

namespace sluice {

std::vector<int32_t> place_units(const std::vector<PlacementUnit>& units, int32_t drives) {
  if (drives < 1) fail("expert placement: {} drives", drives);
  std::vector<int32_t> out(units.size(), 0);
  std::vector<uint64_t> total(size_t(drives), 0), layer_load(size_t(drives), 0);
  size_t i = 0;
  while (i < units.size()) {
    if (i == 0 || units[i].layer != units[i - 1].layer) std::fill(layer_load.begin(), layer_load.end(), 0);
    size_t end = i;  // this expert's units: [i, end)
    while (end < units.size() && units[end].layer == units[i].layer && units[end].expert == units[i].expert) ++end;
    std::vector<size_t> order(end - i);
    std::iota(order.begin(), order.end(), i);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return units[a].bytes > units[b].bytes; });
    std::vector<bool> holds(size_t(drives), false);
    int32_t held = 0;
    for (size_t u : order) {
      int32_t best = -1;
      for (int32_t d = 0; d < drives; ++d) {
        if (held < drives && holds[size_t(d)]) continue;
        if (best < 0 || layer_load[size_t(d)] < layer_load[size_t(best)] ||
            (layer_load[size_t(d)] == layer_load[size_t(best)] && total[size_t(d)] < total[size_t(best)]))
          best = d;
      }
      out[u] = best;
      if (!holds[size_t(best)]) ++held;
      holds[size_t(best)] = true;
      if (held == drives) {  // every drive holds one: the next round may use any again
        std::fill(holds.begin(), holds.end(), false);
        held = 0;
      }
      layer_load[size_t(best)] += units[u].bytes;
      total[size_t(best)] += units[u].bytes;
    }
    i = end;
  }
  return out;
}

}  // namespace sluice
