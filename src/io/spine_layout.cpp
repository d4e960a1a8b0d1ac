#include "io/spine_layout.h"

#include "format/model_layout.h"

namespace sluice {

SpineLayout::SpineLayout(const Checkpoint& ck, const std::vector<std::string>& spine) {
  std::map<int64_t, std::vector<ExpertExtent>> raw;
  for (const auto& name : spine) {
    TensorView t = ck.get(name);
    const int64_t l = layer_of_tensor(name);
    max_layer_ = std::max(max_layer_, l);
    total_ += t.nbytes();
    if (t.nbytes()) raw[l].push_back({ck.file_index(name), t.file_offset, t.nbytes()});
  }
  for (auto& [l, v] : raw) by_layer_[l] = merge_extents(std::move(v));
}

const std::vector<ExpertExtent>& SpineLayout::layer_extents(int64_t l) const {
  static const std::vector<ExpertExtent> none;
  auto it = by_layer_.find(l);
  return it == by_layer_.end() ? none : it->second;
}

uint64_t SpineLayout::layer_bytes(int64_t l) const {
  uint64_t n = 0;
  for (const auto& e : layer_extents(l)) n += e.length;
  return n;
}

}  // namespace sluice
