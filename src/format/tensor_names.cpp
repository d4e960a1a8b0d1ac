// The tensor-name tables of the family table's `tensors` column (format/tensor_names.h).
#include "format/tensor_names.h"

#include <array>

#include "util/error.h"

namespace sluice {

namespace {

using R = TensorRole;

constexpr std::array<std::string_view, kTensorRoles> kRoleNames = {
    "TokenEmbedding", "Output",       "OutputNorm",   "AttnNorm",     "FfnNorm",        "AttnQ",
    "AttnK",          "AttnV",        "AttnO",        "AttnQA",       "AttnQB",         "AttnKvA",
    "AttnKvB",        "AttnGate",     "AttnQNorm",    "AttnKNorm",    "AttnSinks",      "AttnQANorm",
    "AttnKvANorm",    "KdaQConv",     "KdaKConv",     "KdaVConv",     "KdaFA",          "KdaFB",
    "KdaB",           "KdaGA",        "KdaGB",        "KdaONorm",     "KdaDtBias",      "KdaALog",
    "FfnGate",        "FfnUp",        "FfnDown",      "FfnGateInMoe", "FfnUpInMoe",     "FfnDownInMoe",
    "MoeRouter",      "MoeScoreBias", "SharedGate",   "SharedUp",     "SharedDown",     "LatentDown",
    "LatentUp",       "LatentNorm",   "ExpertGateUpBias", "ExpertDownBias", "AttnResNorm", "AttnResProj",
    "FfnResNorm",     "FfnResProj",   "OutAttnResNorm", "OutAttnResProj"};
static_assert(kRoleNames.back() == "OutAttnResProj", "kRoleNames follows TensorRole");

// What Hugging Face decoders of the Llama lineage call their tensors.
constexpr TensorNames kHfDecoder("hf", {
    {R::TokenEmbedding, "model.embed_tokens.weight"},
    {R::Output, "lm_head"},
    {R::OutputNorm, "model.norm.weight"},
    {R::AttnNorm, "model.layers.{}.input_layernorm.weight"},
    {R::FfnNorm, "model.layers.{}.post_attention_layernorm.weight"},
    {R::AttnQ, "model.layers.{}.self_attn.q_proj"},
    {R::AttnK, "model.layers.{}.self_attn.k_proj"},
    {R::AttnV, "model.layers.{}.self_attn.v_proj"},
    {R::AttnO, "model.layers.{}.self_attn.o_proj"},
    {R::FfnGate, "model.layers.{}.mlp.gate_proj"},
    {R::FfnUp, "model.layers.{}.mlp.up_proj"},
    {R::FfnDown, "model.layers.{}.mlp.down_proj"},
});

// DeepSeek-V2's multi-head latent attention, as DeepSeek-V3 and the Kimi models name it.
constexpr TensorNames kMlaDecoder = kHfDecoder.with("mla", {
    {R::AttnQA, "model.layers.{}.self_attn.q_a_proj"},
    {R::AttnQANorm, "model.layers.{}.self_attn.q_a_layernorm.weight"},
    {R::AttnQB, "model.layers.{}.self_attn.q_b_proj"},
    {R::AttnKvA, "model.layers.{}.self_attn.kv_a_proj_with_mqa"},
    {R::AttnKvANorm, "model.layers.{}.self_attn.kv_a_layernorm.weight"},
    {R::AttnKvB, "model.layers.{}.self_attn.kv_b_proj"},
});

}  // namespace

std::string_view tensor_role_name(TensorRole role) {
  return size_t(role) < kRoleNames.size() ? kRoleNames[size_t(role)] : "?";
}

std::string TensorNames::operator()(TensorRole role, int64_t layer) const {
  const std::string_view p = pattern_[size_t(role)];
  if (p.empty()) fail("internal: the {} tensor names have no {}", family_, tensor_role_name(role));
  const size_t at = p.find("{}");
  if (at == std::string_view::npos) return std::string(p);
  if (layer < 0) fail("internal: the {} tensor {} is per layer, and no layer was given", family_, tensor_role_name(role));
  return std::string(p.substr(0, at)) + std::to_string(layer) + std::string(p.substr(at + 2));
}

// DeepSeek-V3 and Kimi K2.
extern const TensorNames deepseek_tensor_names;
constexpr TensorNames deepseek_tensor_names = kMlaDecoder.with("deepseek", {
    {R::MoeRouter, "model.layers.{}.mlp.gate"},
    {R::MoeScoreBias, "model.layers.{}.mlp.gate.e_score_correction_bias"},
    {R::SharedGate, "model.layers.{}.mlp.shared_experts.gate_proj"},
    {R::SharedUp, "model.layers.{}.mlp.shared_experts.up_proj"},
    {R::SharedDown, "model.layers.{}.mlp.shared_experts.down_proj"},
});

extern const TensorNames qwen3_moe_tensor_names;
constexpr TensorNames qwen3_moe_tensor_names = kHfDecoder.with("qwen3_moe", {
    {R::AttnQNorm, "model.layers.{}.self_attn.q_norm.weight"},
    {R::AttnKNorm, "model.layers.{}.self_attn.k_norm.weight"},
    {R::MoeRouter, "model.layers.{}.mlp.gate"},
});

extern const TensorNames gpt_oss_tensor_names;
constexpr TensorNames gpt_oss_tensor_names = kHfDecoder.with("gpt_oss", {
    {R::AttnSinks, "model.layers.{}.self_attn.sinks"},
    {R::MoeRouter, "model.layers.{}.mlp.router"},
    {R::ExpertGateUpBias, "model.layers.{}.mlp.experts.gate_up_proj_bias"},
    {R::ExpertDownBias, "model.layers.{}.mlp.experts.down_proj_bias"},
});

// Kimi Linear and Kimi K3 (its text model, under the "language_model." prefix).
extern const TensorNames kimi_tensor_names;
constexpr TensorNames kimi_tensor_names = kMlaDecoder.with("kimi", {
    {R::AttnGate, "model.layers.{}.self_attn.g_proj"},
    {R::KdaQConv, "model.layers.{}.self_attn.q_conv1d.weight"},
    {R::KdaKConv, "model.layers.{}.self_attn.k_conv1d.weight"},
    {R::KdaVConv, "model.layers.{}.self_attn.v_conv1d.weight"},
    {R::KdaFA, "model.layers.{}.self_attn.f_a_proj"},
    {R::KdaFB, "model.layers.{}.self_attn.f_b_proj"},
    {R::KdaB, "model.layers.{}.self_attn.b_proj"},
    {R::KdaGA, "model.layers.{}.self_attn.g_a_proj"},
    {R::KdaGB, "model.layers.{}.self_attn.g_b_proj"},
    {R::KdaONorm, "model.layers.{}.self_attn.o_norm.weight"},
    {R::KdaDtBias, "model.layers.{}.self_attn.dt_bias"},
    {R::KdaALog, "model.layers.{}.self_attn.A_log"},
    {R::FfnGateInMoe, "model.layers.{}.block_sparse_moe.gate_proj"},
    {R::FfnUpInMoe, "model.layers.{}.block_sparse_moe.up_proj"},
    {R::FfnDownInMoe, "model.layers.{}.block_sparse_moe.down_proj"},
    {R::MoeRouter, "model.layers.{}.block_sparse_moe.gate"},
    {R::MoeScoreBias, "model.layers.{}.block_sparse_moe.gate.e_score_correction_bias"},
    {R::SharedGate, "model.layers.{}.block_sparse_moe.shared_experts.gate_proj"},
    {R::SharedUp, "model.layers.{}.block_sparse_moe.shared_experts.up_proj"},
    {R::SharedDown, "model.layers.{}.block_sparse_moe.shared_experts.down_proj"},
    {R::LatentDown, "model.layers.{}.block_sparse_moe.routed_expert_down_proj"},
    {R::LatentUp, "model.layers.{}.block_sparse_moe.routed_expert_up_proj"},
    {R::LatentNorm, "model.layers.{}.block_sparse_moe.routed_expert_norm.weight"},
    {R::AttnResNorm, "model.layers.{}.self_attention_res_norm.weight"},
    {R::AttnResProj, "model.layers.{}.self_attention_res_proj.weight"},
    {R::FfnResNorm, "model.layers.{}.mlp_res_norm.weight"},
    {R::FfnResProj, "model.layers.{}.mlp_res_proj.weight"},
    {R::OutAttnResNorm, "model.output_attn_res_norm.weight"},
    {R::OutAttnResProj, "model.output_attn_res_proj.weight"},
});

}  // namespace sluice
