// Which bytes of a checkpoint are spine (non-routed-expert weights the model
// uses) and how they group by decoder layer. Used by `sluice prepare` to write
// the spine file and by the spine streamer to read one layer at a time.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "format/checkpoint.h"
#include "io/expert_source.h"
#include "io/streaming_experts.h"

namespace sluice {

class SpineLayout {
 public:
  // `names`: every tensor the model uses (checkpoint names); `experts`: the routed experts.
  SpineLayout(const Checkpoint& ckpt, const std::vector<std::string>& names, const ExpertTable& experts);

  // Spine tensors (not part of any routed expert), in name order.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // Merged byte extents of the spine tensors of decoder layer `l` (-1: outside any layer).
  const std::vector<ExpertExtent>& layer_extents(int64_t l) const;
  uint64_t layer_bytes(int64_t l) const;
  int64_t max_layer() const { return max_layer_; }
  uint64_t total_bytes() const;

  // Layer index parsed from a tensor name ("...layers.12...."), -1 if none.
  static int64_t layer_of(const std::string& name);

 private:
  std::vector<TensorView> tensors_;
  std::map<int64_t, std::vector<ExpertExtent>> by_layer_;
  int64_t max_layer_ = -1;
};

}  // namespace sluice
