// Which drive (expert directory) each part of each routed expert goes to when
// `sluice prepare --pack-experts --expert-dirs A,B,C` spreads the packs.
//
// The unit placed is one projection of an expert (a weight with its scales),
// not the whole expert: a token reads whole experts, so the bytes each drive
// serves for one layer are the sum over the routed experts of their units on
// it. With whole experts on drives, the drive that happens to hold most of a
// layer's top-k sets the layer's read time (8 of 64 experts on 4 drives: the
// busiest drive serves ~1.7x the mean); with an expert's projections on
// different drives every routed expert loads every drive about equally.
//
// Greedy and deterministic: layer by layer, experts in index order, each
// expert's units largest first, each to the drive with the fewest bytes of the
// layer so far among those not yet holding a unit of this expert (ties: fewest
// bytes over all layers, then the lowest index).
#pragma once
#include <cstdint>
#include <vector>

namespace sluice {

struct PlacementUnit {
  int32_t layer = 0, expert = 0;
  uint64_t bytes = 0;
};

// The drive of each unit, in input order. Units of one layer must be
// contiguous and those of one expert contiguous within it; drives >= 1.
std::vector<int32_t> place_units(const std::vector<PlacementUnit>& units, int32_t drives);

}  // namespace sluice
