#include "format/model_layout.h"

#include <algorithm>

#include <fmt/format.h>

#include "util/error.h"

namespace sluice {

Config ModelLayout::text_config(const Config& top) { return top.has("text_config") ? top.sub("text_config") : top; }

std::string ModelLayout::expert_base(int64_t layer, int64_t expert, int which) const {
  if (arch == "kimi_linear" || arch == "kimi_k3") {
    static const char* const kimi[] = {"w1", "w3", "w2"};
    return fmt::format("model.layers.{}.block_sparse_moe.experts.{}.{}", layer, expert, kimi[which]);
  }
  static const char* const hf[] = {"gate_proj", "up_proj", "down_proj"};
  return fmt::format("model.layers.{}.mlp.experts.{}.{}", layer, expert, hf[which]);
}

std::string ModelLayout::stacked_blocks(int64_t layer, int which) const {
  return fmt::format("model.layers.{}.mlp.experts.{}_blocks", layer, which == 0 ? "gate_up_proj" : "down_proj");
}

std::string ModelLayout::stacked_scales(int64_t layer, int which) const {
  return fmt::format("model.layers.{}.mlp.experts.{}_scales", layer, which == 0 ? "gate_up_proj" : "down_proj");
}

namespace {

void deepseek(const Config& cfg, ModelLayout& m) {
  m.n_experts = cfg.get_int("n_routed_experts", 0);
  if (m.n_experts > 0) m.top_k = cfg.req_int("num_experts_per_tok");
  const int64_t first_dense = cfg.get_int("first_k_dense_replace", 0), freq = cfg.get_int("moe_layer_freq", 1);
  if (freq < 1) fail("{}: moe_layer_freq must be at least 1, got {}", cfg.source(), freq);
  for (int64_t l = 0; l < m.n_layers; ++l) m.moe[size_t(l)] = m.n_experts > 0 && l >= first_dense && l % freq == 0;
}

void qwen3(const Config& cfg, ModelLayout& m) {
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

void gpt_oss(const Config& cfg, ModelLayout& m) {
  m.experts = ModelLayout::Experts::Stacked;
  m.n_experts = cfg.req_int("num_local_experts");
  m.top_k = cfg.has("num_experts_per_tok") ? cfg.req_int("num_experts_per_tok") : cfg.req_int("experts_per_token");
  std::fill(m.moe.begin(), m.moe.end(), true);
}

void kimi(const Config& cfg, ModelLayout& m) {
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

}  // namespace

ModelLayout model_layout(const Config& top) {
  ModelLayout m;
  m.arch = top.req_string("model_type");
  const bool deepseek_like = m.arch == "deepseek_v3" || m.arch == "kimi_k2";
  const bool kimi_like = m.arch == "kimi_linear" || m.arch == "kimi_k3";
  if (!deepseek_like && !kimi_like && m.arch != "qwen3_moe" && m.arch != "gpt_oss")
    fail("{}: model_type '{}' is not supported (deepseek_v3, kimi_k2, qwen3_moe, gpt_oss, kimi_linear, kimi_k3 are)",
         top.source(), m.arch);
  const bool nested = kimi_like && top.has("text_config");
  const Config cfg = nested ? top.sub("text_config") : top;
  if (nested) m.prefix = "language_model.";
  m.n_layers = cfg.req_int("num_hidden_layers");
  if (m.n_layers <= 0) fail("{}: vocab_size, hidden_size and num_hidden_layers must be positive", cfg.source());
  m.moe.assign(size_t(m.n_layers), false);
  if (deepseek_like) deepseek(cfg, m);
  else if (m.arch == "qwen3_moe") qwen3(cfg, m);
  else if (m.arch == "gpt_oss") gpt_oss(cfg, m);
  else kimi(cfg, m);
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
