// Where every routed expert's bytes are in a checkpoint, and which tensors are
// the spine (everything else the model reads), from config.json and the
// safetensors headers alone: no weights are read and no model is built.
// prepare, pull, the on-disk expert cache, the streaming reader's fetcher and
// the memory plan use it.
//
// An expert's extents are the byte ranges of its stored weights and their
// scales (for gpt-oss, its slice of each stacked tensor), sorted by position
// and merged where they touch. The spine is every tensor of the text model in
// a decoder layer below num_hidden_layers or outside the layers, that is not
// inside an expert's extents, minus tensors no architecture reads
// (rotary_emb.inv_freq, padding of expert packs).
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "format/checkpoint.h"
#include "format/config.h"
#include "format/extent.h"
#include "format/model_layout.h"

namespace sluice {

class ExpertIndex {
 public:
  ExpertIndex(const Config& cfg, const Checkpoint& ckpt);

  const ModelLayout& layout() const { return layout_; }
  // Layers up to the last MoE layer; dense layers have no experts.
  int32_t layers() const { return int32_t(extents_.size()); }
  int32_t experts(int32_t layer) const { return int32_t(extents_[size_t(layer)].size()); }
  // experts(l) for every layer l (the shape routing statistics and overrides take).
  std::vector<int32_t> experts_per_layer() const {
    std::vector<int32_t> n;
    for (int32_t l = 0; l < layers(); ++l) n.push_back(experts(l));
    return n;
  }
  const std::vector<ExpertExtent>& extents(int32_t layer, int32_t expert) const {
    return extents_[size_t(layer)][size_t(expert)];
  }
  uint64_t bytes(int32_t layer, int32_t expert) const;
  uint64_t total_bytes() const;  // of every routed expert
  int64_t count() const;         // routed experts in all layers
  // The checkpoint tensors making up an expert (PerExpert layouts only; empty for stacked ones).
  const std::vector<std::string>& tensors(int32_t layer, int32_t expert) const {
    return tensors_[size_t(layer)][size_t(expert)];
  }

  // Whether the tensor holds routed-expert bytes only (an expert's weight or
  // scales, or a stacked tensor of them).
  bool is_expert_tensor(const std::string& name) const { return expert_tensors_.count(name) != 0; }

  // Spine tensors (checkpoint names), in name order, and their total size.
  const std::vector<std::string>& spine() const { return spine_; }
  uint64_t spine_bytes() const { return spine_bytes_; }

 private:
  ModelLayout layout_;
  std::vector<std::vector<std::vector<ExpertExtent>>> extents_;
  std::vector<std::vector<std::vector<std::string>>> tensors_;
  std::set<std::string> expert_tensors_;
  std::vector<std::string> spine_;
  uint64_t spine_bytes_ = 0;
};

}  // namespace sluice
