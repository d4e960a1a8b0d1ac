// Where a model family keeps its tensors, read from config.json alone: the
// name prefix of the text model, which decoder layers are mixture-of-experts
// layers, and how routed experts are named. The architecture builders use
// these rules to load the model, and the expert index (format/expert_index.h)
// uses the same rules to locate experts without building a model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/config.h"
#include "format/model_family.h"

namespace sluice {

struct ModelLayout {
  const ModelFamily* family = nullptr;  // its row of the family table
  std::string arch;     // model_type
  std::string prefix;   // prepended to every tensor name ("language_model." for Kimi K3)
  int64_t n_layers = 0;  // decoder layers (tensors of later layers, e.g. MTP heads, are not part of the model)
  std::vector<bool> moe;  // per layer: routed experts instead of a dense MLP
  int64_t n_experts = 0, top_k = 0;

  // How routed experts are stored.
  enum class Experts {
    PerExpert,  // one tensor group per expert and projection (DeepSeek, Qwen3, Kimi)
    Stacked,    // one tensor per projection holding every expert along dim 0 (gpt-oss MXFP4)
  } experts = Experts::PerExpert;

  // PerExpert: the base name (prefix excluded) of expert e's projection in layer l:
  // which = 0 gate, 1 up, 2 down; the weight is `<base>.weight` or `<base>.weight_packed`.
  std::string expert_base(int64_t layer, int64_t expert, int which) const;
  // Stacked: the blocks and scales tensors (prefix excluded) of layer l; which = 0 gate_up, 1 down.
  std::string stacked_blocks(int64_t layer, int which) const;
  std::string stacked_scales(int64_t layer, int which) const;

  bool is_moe(int64_t layer) const { return layer >= 0 && layer < int64_t(moe.size()) && moe[size_t(layer)]; }
  // The text config: top level, or text_config for nested releases (Kimi K3).
  static Config text_config(const Config& top);
};

// Reads the layout rules of `cfg`'s family (format/model_family.h); errors name the field.
ModelLayout model_layout(const Config& cfg);

// Decoder layer index in a tensor name ("...layers.12...."), -1 if none.
int64_t layer_of_tensor(const std::string& name);

}  // namespace sluice
