// `sluice synth` for Kimi K3 (MXFP4 compressed-tensors experts, nested text_config).
#include <cmath>

#include "store/synthetic_recipe.h"
#include "util/error.h"

namespace sluice {

namespace {

using json = nlohmann::json;

json k3_config(const SynthOptions& o, bool real) {
  json t = {{"model_type", "kimi_linear"}, {"rms_norm_eps", 1e-5}, {"hidden_act", "situ"},
            {"activation_situ_beta", 4.0}, {"activation_situ_linear_beta", 25.0}, {"first_k_dense_replace", 1},
            {"moe_layer_freq", 1}, {"num_shared_experts", 2}, {"latent_moe_use_norm", true},
            {"moe_router_activation_func", "sigmoid"}, {"topk_method", "noaux_tc"}, {"use_grouped_topk", true},
            {"num_expert_group", 1}, {"topk_group", 1}, {"moe_renormalize", true}, {"routed_scaling_factor", 1.0},
            {"mla_use_nope", true}, {"mla_use_output_gate", true}, {"num_nextn_predict_layers", 0},
            {"use_cache", true}, {"tie_word_embeddings", false}, {"max_position_embeddings", 1048576},
            {"bos_token_id", 163584}, {"eos_token_id", 163586}};
  int64_t kda_heads, kda_dim;
  if (real) {  // Kimi K3 widths
    t.update({{"vocab_size", 163840}, {"hidden_size", 7168}, {"num_hidden_layers", 2}, {"intermediate_size", 33792},
              {"num_experts", 896}, {"num_experts_per_token", 16}, {"moe_intermediate_size", 3072},
              {"routed_expert_hidden_size", 3584}, {"num_attention_heads", 96}, {"num_key_value_heads", 96},
              {"q_lora_rank", 1536}, {"kv_lora_rank", 512}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64},
              {"v_head_dim", 128}, {"attn_res_block_size", 12}});
    kda_heads = 96, kda_dim = 128;
  } else {
    t.update({{"vocab_size", 1024}, {"hidden_size", 256}, {"num_hidden_layers", 7}, {"intermediate_size", 384},
              {"num_experts", 32}, {"num_experts_per_token", 4}, {"moe_intermediate_size", 64},
              {"routed_expert_hidden_size", 128}, {"num_attention_heads", 4}, {"num_key_value_heads", 4},
              {"q_lora_rank", 64}, {"kv_lora_rank", 32}, {"qk_nope_head_dim", 32}, {"qk_rope_head_dim", 16},
              {"v_head_dim", 32}, {"attn_res_block_size", 3}});
    kda_heads = 4, kda_dim = 32;
  }
  if (o.layers) t["num_hidden_layers"] = *o.layers;
  if (o.experts) t["num_experts"] = *o.experts;
  if (o.top_k) t["num_experts_per_token"] = *o.top_k;
  if (o.vocab) t["vocab_size"] = *o.vocab;
  if (o.hidden) t["hidden_size"] = *o.hidden;
  if (o.moe_intermediate) t["moe_intermediate_size"] = *o.moe_intermediate;
  const int64_t L = t["num_hidden_layers"];
  // K3's schedule: MLA on every fourth layer and on the last one (one-based ids).
  json kda = json::array(), full = json::array();
  for (int64_t i = 1; i <= L; ++i) ((i % 4 == 0 || i == L) && L > 1 ? full : kda).push_back(i);
  t["linear_attn_config"] = {{"num_heads", kda_heads}, {"head_dim", kda_dim}, {"short_conv_kernel_size", 4},
                             {"use_full_rank_gate", true}, {"gate_lower_bound", -5.0}, {"kda_layers", kda},
                             {"full_attn_layers", full}};
  t["quantization_config"] = {
      {"quant_method", "compressed-tensors"}, {"format", "mxfp4-pack-quantized"}, {"quantization_status", "compressed"},
      {"config_groups", {{"group_0", {{"format", "mxfp4-pack-quantized"}, {"targets", {"Linear"}},
                                      {"weights", {{"num_bits", 4}, {"type", "float"}, {"symmetric", true},
                                                   {"strategy", "group"}, {"group_size", 32},
                                                   {"scale_dtype", "torch.uint8"}}}}}}},
      {"ignore", {"re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
                  "re:.*lm_head.*"}}};
  return {{"architectures", {"KimiK3ForConditionalGeneration"}}, {"model_type", "kimi_k3"}, {"dtype", "bfloat16"},
          {"bos_token_id", 163584}, {"eos_token_id", 163586}, {"tie_word_embeddings", false}, {"text_config", t}};
}

std::vector<Spec> k3_tensors(const json& top) {
  const json& c = top["text_config"];
  const ModelFamily& F = synth_family(top);
  const TensorNames& N = *F.tensors;
  using R = TensorRole;
  // Every name under the text model's prefix.
  const std::string M(kNestedTextPrefix);
  auto name = [&](TensorRole r, int64_t l = -1) { return M + N(r, l); };
  auto weight = [&](TensorRole r, int64_t l = -1) { return M + N.weight(r, l); };
  Layout L;
  const int64_t D = c["hidden_size"], H = c["num_attention_heads"], ql = c["q_lora_rank"], kl = c["kv_lora_rank"];
  const int64_t nope = c["qk_nope_head_dim"], rope = c["qk_rope_head_dim"], v = c["v_head_dim"];
  const int64_t E = c["num_experts"], I = c["moe_intermediate_size"], DI = c["intermediate_size"];
  const int64_t LW = c["routed_expert_hidden_size"], NL = c["num_hidden_layers"];
  const json& lac = c["linear_attn_config"];
  const int64_t KH = lac["num_heads"], KD = lac["head_dim"], C = KH * KD;
  std::vector<bool> mla(size_t(NL), false);
  for (int64_t id : lac["full_attn_layers"]) mla[size_t(id - 1)] = true;
  for (int64_t l = 0; l < NL; ++l) {
    L.shard = int(l);
    L.norm(name(R::AttnNorm, l), D);
    L.norm(name(R::FfnNorm, l), D);
    L.norm(name(R::AttnResNorm, l), D);
    L.mat(name(R::AttnResProj, l), 1, D);
    L.norm(name(R::FfnResNorm, l), D);
    L.mat(name(R::FfnResProj, l), 1, D);
    if (!mla[size_t(l)]) {
      for (TensorRole r : {R::AttnQ, R::AttnK, R::AttnV, R::AttnGate}) L.mat(weight(r, l), C, D);
      for (TensorRole r : {R::KdaQConv, R::KdaKConv, R::KdaVConv})
        L.vec(name(r, l), {C, 1, 4}, Init::Bias, 0.5, DType::F32);
      L.mat(weight(R::KdaFA, l), KD, D);
      L.mat(weight(R::KdaFB, l), C, KD);
      L.vec(name(R::KdaDtBias, l), {C}, Init::DtBias, 0, DType::F32);
      L.vec(name(R::KdaALog, l), {std::max(KD, KH)}, Init::ALog, double(KH), DType::F32);
      L.mat(weight(R::KdaB, l), KH, D);
      L.norm(name(R::KdaONorm, l), KD, DType::F32);
      L.mat(weight(R::AttnO, l), D, C);
    } else {
      L.mat(weight(R::AttnQA, l), ql, D);
      L.norm(name(R::AttnQANorm, l), ql);
      L.mat(weight(R::AttnQB, l), H * (nope + rope), ql);
      L.mat(weight(R::AttnKvA, l), kl + rope, D);
      L.norm(name(R::AttnKvANorm, l), kl);
      L.mat(weight(R::AttnKvB, l), H * (nope + v), kl);
      L.mat(weight(R::AttnGate, l), H * v, D);
      L.mat(weight(R::AttnO, l), D, H * v);
    }
    if (l < c["first_k_dense_replace"].get<int64_t>()) {
      L.mat(weight(R::FfnGate, l), DI, D);
      L.mat(weight(R::FfnUp, l), DI, D);
      L.mat(weight(R::FfnDown, l), D, DI);
      continue;
    }
    L.mat(weight(R::MoeRouter, l), E, D);
    L.vec(name(R::MoeScoreBias, l), {E}, Init::Bias, 0.15, DType::F32);
    L.mat(weight(R::LatentDown, l), LW, D);
    L.norm(name(R::LatentNorm, l), LW);
    L.mat(weight(R::LatentUp, l), D, LW);
    const int64_t S = I * c["num_shared_experts"].get<int64_t>();
    L.mat(weight(R::SharedGate, l), S, D);
    L.mat(weight(R::SharedUp, l), S, D);
    L.mat(weight(R::SharedDown, l), D, S);
    for (int64_t e = 0; e < E; ++e) {  // gate and up: I x LW; down: LW x I
      L.mxfp4(M + expert_tensor_base(F, l, e, 0), I, LW);
      L.mxfp4(M + expert_tensor_base(F, l, e, 2), LW, I);
      L.mxfp4(M + expert_tensor_base(F, l, e, 1), I, LW);
    }
  }
  L.shard = int(NL);
  const int64_t V = c["vocab_size"];
  L.mat(name(R::TokenEmbedding), V, D, 1.0);
  L.mat(weight(R::Output), V, D);
  L.norm(name(R::OutputNorm), D);
  L.norm(name(R::OutAttnResNorm), D);
  L.mat(name(R::OutAttnResProj), 1, D);
  return L.t;
}

constexpr SynthRecipe kKimiK3Recipe{&k3_config, &k3_tensors, "text_config", "num_experts", "num_experts_per_token"};

}  // namespace

const SynthRecipe* kimi_k3_synth_recipe() { return &kKimiK3Recipe; }

}  // namespace sluice
