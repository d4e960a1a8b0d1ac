// How the spine (non-routed-expert weights the model uses) groups by decoder
// layer: the byte extents the spine streamer reads one layer at a time.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "format/checkpoint.h"
#include "format/extent.h"

namespace sluice {

class SpineLayout {
 public:
  // `spine`: the spine tensors (checkpoint names, e.g. ExpertIndex::spine()).
  SpineLayout(const Checkpoint& ckpt, const std::vector<std::string>& spine);

  // Merged byte extents of the spine tensors of decoder layer `l` (-1: outside any layer).
  const std::vector<ExpertExtent>& layer_extents(int64_t l) const;
  uint64_t layer_bytes(int64_t l) const;
  int64_t max_layer() const { return max_layer_; }
  uint64_t total_bytes() const { return total_; }

 private:
  std::map<int64_t, std::vector<ExpertExtent>> by_layer_;
  int64_t max_layer_ = -1;
  uint64_t total_ = 0;
};

}  // namespace sluice
