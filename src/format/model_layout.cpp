#include "format/model_layout.h"

#include <fmt/format.h>

#include "util/error.h"

namespace sluice {

Config ModelLayout::text_config(const Config& top) { return top.has("text_config") ? top.sub("text_config") : top; }

std::string ModelLayout::expert_base(int64_t layer, int64_t expert, int which) const {
  return expert_tensor_base(*family, layer, expert, which);
}

std::string ModelLayout::stacked_blocks(int64_t layer, int which) const {
  const ExpertTensorNames& n = family->experts;
  return fmt::format("model.layers.{}.{}.{}_blocks", layer, n.group, n.projection[which]);
}

std::string ModelLayout::stacked_scales(int64_t layer, int which) const {
  const ExpertTensorNames& n = family->experts;
  return fmt::format("model.layers.{}.{}.{}_scales", layer, n.group, n.projection[which]);
}

ModelLayout model_layout(const Config& top) {
  ModelLayout m;
  m.family = &model_family_of(top);
  m.arch = std::string(m.family->model_type);
  const bool nested = m.family->nested_text_config && top.has("text_config");
  const Config cfg = nested ? top.sub("text_config") : top;
  if (nested) m.prefix = std::string(kNestedTextPrefix);
  m.n_layers = cfg.req_int("num_hidden_layers");
  if (m.n_layers <= 0) fail("{}: vocab_size, hidden_size and num_hidden_layers must be positive", cfg.source());
  m.moe.assign(size_t(m.n_layers), false);
  m.experts = m.family->experts.stacked ? ModelLayout::Experts::Stacked : ModelLayout::Experts::PerExpert;
  m.family->read_moe_layers(cfg, m);
  return m;
}

int64_t layer_of_tensor(const std::string& name) {
  auto p = name.find("layers.");
  if (p == std::string::npos) return -1;
  p += 7;
  int64_t v = 0;
  bool digit = false;
  while (p < name.size() && name[p] >= '0' && name[p] <= '9') v = v * 10 + (name[p++] - '0'), digit = true;
  return digit && p < name.size() && name[p] == '.' ? v : -1;
}

}  // namespace sluice
