// `sluice synth` for Qwen3-MoE (bf16; its router has no score-correction bias).
#include <cmath>

#include "store/synthetic_recipe.h"
#include "util/error.h"

namespace sluice {

namespace {

using json = nlohmann::json;

json qwen_config(const SynthOptions& o, bool real) {
  json c = {{"architectures", {"Qwen3MoeForCausalLM"}}, {"model_type", "qwen3_moe"}, {"hidden_act", "silu"},
            {"rms_norm_eps", 1e-6}, {"decoder_sparse_step", 1}, {"mlp_only_layers", json::array()},
            {"norm_topk_prob", true}, {"tie_word_embeddings", false}, {"attention_bias", false},
            {"rope_theta", 1000000.0}, {"torch_dtype", "bfloat16"}, {"bos_token_id", 1}, {"eos_token_id", 2}};
  if (real) {  // Qwen3-30B-A3B widths
    c.update({{"vocab_size", 151936}, {"hidden_size", 2048}, {"intermediate_size", 6144},
              {"moe_intermediate_size", 768}, {"num_hidden_layers", 2}, {"num_attention_heads", 32},
              {"num_key_value_heads", 4}, {"head_dim", 128}, {"num_experts", 128}, {"num_experts_per_tok", 8},
              {"max_position_embeddings", 40960}});
  } else {
    c.update({{"vocab_size", 1024}, {"hidden_size", 256}, {"intermediate_size", 384}, {"moe_intermediate_size", 96},
              {"num_hidden_layers", 3}, {"num_attention_heads", 8}, {"num_key_value_heads", 2}, {"head_dim", 32},
              {"num_experts", 16}, {"num_experts_per_tok", 4}, {"max_position_embeddings", 4096}});
  }
  if (o.layers) c["num_hidden_layers"] = *o.layers;
  if (o.experts) c["num_experts"] = *o.experts;
  if (o.top_k) c["num_experts_per_tok"] = *o.top_k;
  if (o.vocab) c["vocab_size"] = *o.vocab;
  if (o.hidden) c["hidden_size"] = *o.hidden;
  if (o.moe_intermediate) c["moe_intermediate_size"] = *o.moe_intermediate;
  return c;
}

std::vector<Spec> qwen_tensors(const json& c) {
  Layout L;
  const int64_t D = c["hidden_size"], H = c["num_attention_heads"], KV = c["num_key_value_heads"], hd = c["head_dim"];
  const int64_t E = c["num_experts"], I = c["moe_intermediate_size"], NL = c["num_hidden_layers"];
  for (int64_t l = 0; l < NL; ++l) {
    L.shard = int(l);
    const std::string P = "model.layers." + std::to_string(l) + ".";
    L.norm(P + "input_layernorm.weight", D);
    L.norm(P + "post_attention_layernorm.weight", D);
    L.mat(P + "self_attn.q_proj.weight", H * hd, D);
    L.mat(P + "self_attn.k_proj.weight", KV * hd, D);
    L.mat(P + "self_attn.v_proj.weight", KV * hd, D);
    L.mat(P + "self_attn.o_proj.weight", D, H * hd);
    L.norm(P + "self_attn.q_norm.weight", hd);
    L.norm(P + "self_attn.k_norm.weight", hd);
    L.mat(P + "mlp.gate.weight", E, D);
    for (int64_t e = 0; e < E; ++e) {
      const std::string X = P + "mlp.experts." + std::to_string(e) + ".";
      L.mat(X + "gate_proj.weight", I, D);
      L.mat(X + "up_proj.weight", I, D);
      L.mat(X + "down_proj.weight", D, I);
    }
  }
  L.shard = int(NL);
  L.mat("model.embed_tokens.weight", c["vocab_size"], D, 1.0);
  L.mat("lm_head.weight", c["vocab_size"], D);
  L.norm("model.norm.weight", D);
  return L.t;
}

constexpr SynthRecipe kRecipe{&qwen_config, &qwen_tensors, "", "", ""};

}  // namespace

const SynthRecipe* qwen3_moe_synth_recipe() { return &kRecipe; }

}  // namespace sluice
