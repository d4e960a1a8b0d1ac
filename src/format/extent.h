// A contiguous run of bytes in one file of a checkpoint.
#pragma once
#include <cstdint>
#include <vector>

namespace sluice {

struct ExpertExtent {
  int32_t file = 0;  // index into Checkpoint::files() (or Manifest::files)
  uint64_t offset = 0, length = 0;
  bool operator==(const ExpertExtent&) const = default;
};

// Sorts by (file, offset) and merges extents that touch or overlap.
std::vector<ExpertExtent> merge_extents(std::vector<ExpertExtent> v);

}  // namespace sluice
