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
  const ModelFamily& F = synth_family(c);
  const TensorNames& N = *F.tensors;
  using R = TensorRole;
  Layout L;
  const int64_t D = c["hidden_size"], H = c["num_attention_heads"], KV = c["num_key_value_heads"], hd = c["head_dim"];
  const int64_t E = c["num_experts"], I = c["moe_intermediate_size"], NL = c["num_hidden_layers"];
  for (int64_t l = 0; l < NL; ++l) {
    L.shard = int(l);
    L.norm(N(R::AttnNorm, l), D);
    L.norm(N(R::FfnNorm, l), D);
    L.mat(N.weight(R::AttnQ, l), H * hd, D);
    L.mat(N.weight(R::AttnK, l), KV * hd, D);
    L.mat(N.weight(R::AttnV, l), KV * hd, D);
    L.mat(N.weight(R::AttnO, l), D, H * hd);
    L.norm(N(R::AttnQNorm, l), hd);
    L.norm(N(R::AttnKNorm, l), hd);
    L.mat(N.weight(R::MoeRouter, l), E, D);
    for (int64_t e = 0; e < E; ++e) {
      L.mat(expert_tensor_base(F, l, e, 0) + ".weight", I, D);
      L.mat(expert_tensor_base(F, l, e, 1) + ".weight", I, D);
      L.mat(expert_tensor_base(F, l, e, 2) + ".weight", D, I);
    }
  }
  L.shard = int(NL);
  L.mat(N(R::TokenEmbedding), c["vocab_size"], D, 1.0);
  L.mat(N.weight(R::Output), c["vocab_size"], D);
  L.norm(N(R::OutputNorm), D);
  return L.t;
}

constexpr SynthRecipe kQwen3MoeRecipe{&qwen_config, &qwen_tensors, "", "", ""};

}  // namespace

const SynthRecipe* qwen3_moe_synth_recipe() { return &kQwen3MoeRecipe; }

}  // namespace sluice
