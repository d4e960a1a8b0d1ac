#include "format/model_family.h"

#include <algorithm>

#include <fmt/format.h>

#include "format/model_layout.h"
#include "util/error.h"

namespace sluice {

namespace {

// ---------------------------------------------------------------- tensor names of routed experts
constexpr ExpertTensorNames kHfExperts{false, "mlp.experts", {"gate_proj", "up_proj", "down_proj"}};
constexpr ExpertTensorNames kKimiExperts{false, "block_sparse_moe.experts", {"w1", "w3", "w2"}};
constexpr ExpertTensorNames kStackedExperts{true, "mlp.experts", {"gate_up_proj", "down_proj", ""}};

// ---------------------------------------------------------------- which layers are MoE (config keys)
// DeepSeek-V3 / Kimi K2: n_routed_experts, dense below first_k_dense_replace, then every moe_layer_freq-th.
void deepseek_moe_layers(const Config& cfg, ModelLayout& m) {
  m.n_experts = cfg.get_int("n_routed_experts", 0);
  if (m.n_experts > 0) m.top_k = cfg.req_int("num_experts_per_tok");
  const int64_t first_dense = cfg.get_int("first_k_dense_replace", 0), freq = cfg.get_int("moe_layer_freq", 1);
  if (freq < 1) fail("{}: moe_layer_freq must be at least 1, got {}", cfg.source(), freq);
  for (int64_t l = 0; l < m.n_layers; ++l) m.moe[size_t(l)] = m.n_experts > 0 && l >= first_dense && l % freq == 0;
}

// Qwen3-MoE: num_experts, every decoder_sparse_step-th layer except mlp_only_layers.
void qwen3_moe_layers(const Config& cfg, ModelLayout& m) {
  m.n_experts = cfg.get_int("num_experts", 0);
  m.top_k = cfg.get_int("num_experts_per_tok", 0);
  const int64_t step = cfg.get_int("decoder_sparse_step", 1);
  if (step < 1) fail("{}: decoder_sparse_step must be at least 1, got {}", cfg.source(), step);
  const auto mlp_only = cfg.get_ints("mlp_only_layers");
  for (int64_t l = 0; l < m.n_layers; ++l) {
    const bool dense_only = std::find(mlp_only.begin(), mlp_only.end(), l) != mlp_only.end();
    m.moe[size_t(l)] = !dense_only && m.n_experts > 0 && (l + 1) % step == 0;
  }
}

// gpt-oss: num_local_experts on every layer, stacked.
void gpt_oss_moe_layers(const Config& cfg, ModelLayout& m) {
  m.n_experts = cfg.req_int("num_local_experts");
  m.top_k = cfg.has("num_experts_per_tok") ? cfg.req_int("num_experts_per_tok") : cfg.req_int("experts_per_token");
  std::fill(m.moe.begin(), m.moe.end(), true);
}

// Kimi Linear / K3: num_experts, by mlp_layer_types when given, else as DeepSeek-V3.
void kimi_moe_layers(const Config& cfg, ModelLayout& m) {
  m.n_experts = cfg.req_int("num_experts");
  m.top_k = cfg.req_int("num_experts_per_token");
  auto mlp_types = cfg.get_strings("mlp_layer_types");
  if (!mlp_types.empty() && int64_t(mlp_types.size()) != m.n_layers)
    fail("{}: mlp_layer_types has {} entries for {} layers", cfg.source(), mlp_types.size(), m.n_layers);
  const int64_t first_dense = cfg.get_int("first_k_dense_replace", 0), freq = cfg.get_int("moe_layer_freq", 1);
  if (freq < 1) fail("{}: moe_layer_freq must be at least 1, got {}", cfg.source(), freq);
  for (int64_t l = 0; l < m.n_layers; ++l)
    m.moe[size_t(l)] = mlp_types.empty() ? (l >= first_dense && l % freq == 0) : mlp_types[size_t(l)] == "sparse";
}

constexpr bool TopLevel = false, Nested = true;

// ---------------------------------------------------------------- the table
}  // namespace

// The tensor-name tables the rows name (format/tensor_names.cpp).
#define SLUICE_MODEL_FAMILY(model_type, text_config, experts, tensors, moe_layers, builder, chat_syntax, synth) \
  extern const TensorNames tensors##_tensor_names;
#include "format/model_families.def"

namespace {

constexpr ModelFamily kFamilies[] = {
#define SLUICE_MODEL_FAMILY(model_type, text_config, experts, tensors, moe_layers, builder, chat_syntax, synth) \
  {FamilyId::model_type, #model_type, text_config, experts, &tensors##_tensor_names, &moe_layers},
#include "format/model_families.def"
};

struct DrafterName {
  DrafterFamily family;
  std::string_view name;
};
constexpr DrafterName kDrafters[] = {{DrafterFamily::DSpark, "k3_dspark"}, {DrafterFamily::Eagle3, "k3_eagle3"}};

}  // namespace

std::span<const ModelFamily> model_families() { return kFamilies; }

std::string expert_tensor_base(const ModelFamily& f, int64_t layer, int64_t expert, int which) {
  return fmt::format("model.layers.{}.{}.{}.{}", layer, f.experts.group, expert, f.experts.projection[which]);
}

const ModelFamily& model_family(FamilyId id) { return kFamilies[size_t(id)]; }

const ModelFamily* find_model_family(std::string_view model_type) {
  for (const ModelFamily& f : kFamilies)
    if (f.model_type == model_type) return &f;
  return nullptr;
}

std::string supported_model_types() {
  std::string list;
  for (const ModelFamily& f : kFamilies) list += (list.empty() ? "" : ", ") + std::string(f.model_type);
  return list;
}

const ModelFamily& model_family_of(const Config& top) {
  const std::string type = top.req_string("model_type");
  if (const ModelFamily* f = find_model_family(type)) return *f;
  fail("{}: model_type '{}' is not supported ({} are)", top.source(), type, supported_model_types());
}

DrafterFamily drafter_family_of(const Config& c) {
  if (c.get_string("model_type", "") == drafter_family_name(DrafterFamily::DSpark)) return DrafterFamily::DSpark;
  for (const std::string& a : c.get_strings("architectures"))
    if (a.rfind("Eagle3", 0) == 0) return DrafterFamily::Eagle3;
  return DrafterFamily::None;
}

std::string_view drafter_family_name(DrafterFamily f) {
  for (const DrafterName& d : kDrafters)
    if (d.family == f) return d.name;
  return "";
}

DrafterFamily drafter_family_named(std::string_view name) {
  for (const DrafterName& d : kDrafters)
    if (d.name == name) return d.family;
  return DrafterFamily::None;
}

}  // namespace sluice
