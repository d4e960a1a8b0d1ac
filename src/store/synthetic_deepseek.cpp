// `sluice synth` for DeepSeek-V3 and Kimi K2 (bf16, FP8 block-scaled or INT4 experts).
#include <cmath>

#include "store/synthetic_recipe.h"
#include "util/error.h"

namespace sluice {

namespace {

using json = nlohmann::json;

json deepseek_config(const SynthOptions& o, bool real) {
  json c = {{"architectures", {"DeepseekV3ForCausalLM"}}, {"model_type", o.arch},
            {"attention_bias", false}, {"hidden_act", "silu"}, {"rms_norm_eps", 1e-6},
            {"first_k_dense_replace", 1}, {"moe_layer_freq", 1}, {"n_shared_experts", 1},
            {"scoring_func", "sigmoid"}, {"topk_method", "noaux_tc"}, {"norm_topk_prob", true},
            {"tie_word_embeddings", false}, {"num_nextn_predict_layers", 0}, {"torch_dtype", "bfloat16"},
            {"bos_token_id", 0}, {"eos_token_id", 1}};
  if (real) {  // Kimi K2 widths
    c.update({{"vocab_size", 163840}, {"hidden_size", 7168}, {"intermediate_size", 18432},
              {"moe_intermediate_size", 2048}, {"num_hidden_layers", 2}, {"num_attention_heads", 64},
              {"num_key_value_heads", 64}, {"n_routed_experts", 384}, {"num_experts_per_tok", 8},
              {"n_group", 1}, {"topk_group", 1}, {"routed_scaling_factor", 2.827}, {"q_lora_rank", 1536},
              {"kv_lora_rank", 512}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64}, {"v_head_dim", 128},
              {"max_position_embeddings", 131072}, {"rope_theta", 50000.0},
              {"rope_scaling", {{"type", "yarn"}, {"factor", 32.0}, {"beta_fast", 1.0}, {"beta_slow", 1.0},
                                {"mscale", 1.0}, {"mscale_all_dim", 1.0}, {"original_max_position_embeddings", 4096}}}});
  } else {
    c.update({{"vocab_size", 1024}, {"hidden_size", 256}, {"intermediate_size", 384},
              {"moe_intermediate_size", 64}, {"num_hidden_layers", 4}, {"num_attention_heads", 4},
              {"num_key_value_heads", 4}, {"n_routed_experts", 32}, {"num_experts_per_tok", 4},
              {"n_group", 4}, {"topk_group", 2}, {"routed_scaling_factor", 2.827}, {"q_lora_rank", 192},
              {"kv_lora_rank", 128}, {"qk_nope_head_dim", 32}, {"qk_rope_head_dim", 16}, {"v_head_dim", 32},
              {"max_position_embeddings", 4096}, {"rope_theta", 50000.0},
              {"rope_scaling", {{"type", "yarn"}, {"factor", 8.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                                {"mscale", 1.0}, {"mscale_all_dim", 1.0}, {"original_max_position_embeddings", 512}}}});
  }
  if (o.layers) c["num_hidden_layers"] = *o.layers;
  if (o.experts) c["n_routed_experts"] = *o.experts;
  if (o.top_k) c["num_experts_per_tok"] = *o.top_k;
  if (o.vocab) c["vocab_size"] = *o.vocab;
  if (o.hidden) c["hidden_size"] = *o.hidden;
  if (o.moe_intermediate) c["moe_intermediate_size"] = *o.moe_intermediate;
  const int64_t E = c["n_routed_experts"];
  if (E % c["n_group"].get<int64_t>()) c["n_group"] = 1, c["topk_group"] = 1;
  std::string fmt = o.expert_format == "native" ? (real ? "fp8" : "bf16") : o.expert_format;
  if (fmt == "fp8") {
    c["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                {"weight_block_size", {128, 128}}};
  } else if (fmt == "int4") {
    c["quantization_config"] = {
        {"quant_method", "compressed-tensors"}, {"format", "pack-quantized"}, {"quantization_status", "compressed"},
        {"config_groups", {{"group_0", {{"targets", {"Linear"}},
                                        {"weights", {{"num_bits", 4}, {"type", "int"}, {"symmetric", true},
                                                     {"strategy", "group"}, {"group_size", 32}}}}}}},
        {"ignore", {"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"}}};
  } else if (fmt != "bf16") {
    fail("synth: --expert-format '{}' is not one of bf16, fp8, int4", fmt);
  }
  return c;
}

std::vector<Spec> deepseek_tensors(const json& c) {
  const ModelFamily& F = synth_family(c);
  const TensorNames& N = *F.tensors;
  using R = TensorRole;
  Layout L;
  const int64_t D = c["hidden_size"], H = c["num_attention_heads"], ql = c["q_lora_rank"], kl = c["kv_lora_rank"];
  const int64_t nope = c["qk_nope_head_dim"], rope = c["qk_rope_head_dim"], v = c["v_head_dim"];
  const int64_t E = c["n_routed_experts"], I = c["moe_intermediate_size"], DI = c["intermediate_size"];
  const int64_t NL = c["num_hidden_layers"], fk = c["first_k_dense_replace"];
  std::string fmt = "bf16";
  if (c.contains("quantization_config"))
    fmt = c["quantization_config"]["quant_method"] == "fp8" ? "fp8" : "int4";
  const std::string dense_fmt = fmt == "fp8" ? "fp8" : "bf16";  // INT4 releases keep non-experts in bf16
  for (int64_t l = 0; l < NL; ++l) {
    L.shard = int(l);
    L.norm(N(R::AttnNorm, l), D);
    L.norm(N(R::FfnNorm, l), D);
    L.expert(N(R::AttnQA, l), ql, D, dense_fmt);
    L.norm(N(R::AttnQANorm, l), ql);
    L.expert(N(R::AttnQB, l), H * (nope + rope), ql, dense_fmt);
    L.expert(N(R::AttnKvA, l), kl + rope, D, dense_fmt);
    L.norm(N(R::AttnKvANorm, l), kl);
    L.expert(N(R::AttnKvB, l), H * (nope + v), kl, dense_fmt);
    L.expert(N(R::AttnO, l), D, H * v, dense_fmt);
    if (l < fk) {
      L.expert(N(R::FfnGate, l), DI, D, dense_fmt);
      L.expert(N(R::FfnUp, l), DI, D, dense_fmt);
      L.expert(N(R::FfnDown, l), D, DI, dense_fmt);
      continue;
    }
    L.mat(N.weight(R::MoeRouter, l), E, D);
    L.vec(N(R::MoeScoreBias, l), {E}, Init::Bias, 0.1, DType::F32);
    const int64_t S = I * c["n_shared_experts"].get<int64_t>();
    L.expert(N(R::SharedGate, l), S, D, dense_fmt);
    L.expert(N(R::SharedUp, l), S, D, dense_fmt);
    L.expert(N(R::SharedDown, l), D, S, dense_fmt);
    for (int64_t e = 0; e < E; ++e) {
      L.expert(expert_tensor_base(F, l, e, 0), I, D, fmt);
      L.expert(expert_tensor_base(F, l, e, 1), I, D, fmt);
      L.expert(expert_tensor_base(F, l, e, 2), D, I, fmt);
    }
  }
  L.shard = int(NL);
  const int64_t V = c["vocab_size"];
  L.mat(N(R::TokenEmbedding), V, D, 1.0);
  L.mat(N.weight(R::Output), V, D);
  L.norm(N(R::OutputNorm), D);
  return L.t;
}

constexpr SynthRecipe kDeepseekRecipe{&deepseek_config, &deepseek_tensors, "", "n_routed_experts", "num_experts_per_tok"};

}  // namespace

const SynthRecipe* deepseek_synth_recipe() { return &kDeepseekRecipe; }

}  // namespace sluice
