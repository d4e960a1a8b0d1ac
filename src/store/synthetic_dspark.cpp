#include "store/synthetic_dspark.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <fmt/format.h>

#include "format/safetensors.h"
#include "store/random_bf16.h"
#include "util/error.h"

namespace sluice {

DSparkSynthOptions dspark_synth_for_target(int64_t target_hidden, int64_t target_vocab, int64_t target_layers) {
  DSparkSynthOptions o;
  o.hidden = o.target_hidden = target_hidden;
  o.vocab = target_vocab;
  o.target_layer_count = target_layers;
  o.intermediate = 2 * target_hidden;
  o.heads = 4;
  o.q_lora = 64;
  o.kv_lora = 32;
  o.nope = 32;
  o.rope_dim = 16;
  o.v_dim = 32;
  o.markov_rank = 16;
  o.mask_token = int32_t(target_vocab - 3);
  o.target_layers.clear();
  for (int64_t k3 : {2, 23, 47, 71, 89}) o.target_layers.push_back(k3 * target_layers / 93);
  return o;
}

nlohmann::json dspark_synth_config(const DSparkSynthOptions& o) {
  return {{"architectures", {"K3DSparkModel"}},
          {"model_type", "k3_dspark"},
          {"hidden_size", o.hidden},
          {"intermediate_size", o.intermediate},
          {"num_hidden_layers", o.layers},
          {"num_attention_heads", o.heads},
          {"num_key_value_heads", o.heads},
          {"q_lora_rank", o.q_lora},
          {"kv_lora_rank", o.kv_lora},
          {"qk_nope_head_dim", o.nope},
          {"qk_rope_head_dim", o.rope_dim},
          {"v_head_dim", o.v_dim},
          {"mla_use_nope", false},
          {"mla_use_output_gate", false},
          {"vocab_size", o.vocab},
          {"rms_norm_eps", 1e-05},
          {"max_position_embeddings", 1048576},
          {"rope_theta", 50000.0},
          {"num_target_layers", int64_t(o.target_layers.size())},
          {"target_hidden_size", o.target_hidden},
          {"target_num_hidden_layers", o.target_layer_count},
          {"target_layer_ids", o.target_layers},
          {"mask_token_id", o.mask_token},
          {"markov_rank", o.markov_rank},
          {"markov_head_type", "vanilla"},
          {"enable_confidence_head", true},
          {"confidence_head_with_markov", true},
          {"tie_word_embeddings", false},
          {"draft_vocab_size", o.vocab},
          {"torch_dtype", "bfloat16"},
          {"rope_parameters",
           {{"rope_type", "yarn"},
            {"factor", 32.0},
            {"original_max_position_embeddings", 32768},
            {"rope_theta", 50000.0},
            {"beta_fast", 32},
            {"beta_slow", 1},
            {"mscale", 1.0},
            {"mscale_all_dim", 1.0}}}};
}

void synthesize_dspark(const DSparkSynthOptions& o) {
  namespace fs = std::filesystem;
  fs::create_directories(o.out_dir);
  std::mt19937_64 rng(o.seed);
  const int64_t D = o.hidden, W = o.target_hidden * int64_t(o.target_layers.size());
  const int64_t qh = o.nope + o.rope_dim;
  std::vector<TensorData> t;
  // Products scaled by 1/sqrt(fan_in) keep activations O(1); norms near 1.
  auto linear = [&](const std::string& name, int64_t rows, int64_t cols) {
    t.push_back(random_bf16(name, {rows, cols}, rng, 1.0 / std::sqrt(double(cols)), 0.0));
  };
  auto norm = [&](const std::string& name, int64_t n) { t.push_back(random_bf16(name, {n}, rng, 0.05, 1.0)); };
  t.push_back(random_bf16("confidence_head.proj.bias", {1}, rng, 0.1, 0.0));
  linear("confidence_head.proj.weight", 1, D + o.markov_rank);
  norm("context_norm.weight", D);
  linear("context_proj.weight", D, W);
  t.push_back(random_bf16("embed_tokens.weight", {o.vocab, D}, rng, 1.0, 0.0));  // borrowed from the target when loaded
  norm("final_norm.weight", D);
  for (int64_t l = 0; l < o.layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l), a = p + "self_attn.";
    norm(p + "input_layernorm.weight", D);
    linear(p + "mlp.down_proj.weight", D, o.intermediate);
    linear(p + "mlp.gate_proj.weight", o.intermediate, D);
    linear(p + "mlp.up_proj.weight", o.intermediate, D);
    norm(p + "post_attention_layernorm.weight", D);
    norm(a + "kv_a_layernorm.weight", o.kv_lora);
    linear(a + "kv_a_proj_with_mqa.weight", o.kv_lora + o.rope_dim, D);
    linear(a + "kv_b_proj.weight", o.heads * (o.nope + o.v_dim), o.kv_lora);
    linear(a + "o_proj.weight", D, o.heads * o.v_dim);
    norm(a + "q_a_layernorm.weight", o.q_lora);
    linear(a + "q_a_proj.weight", o.q_lora, D);
    linear(a + "q_b_proj.weight", o.heads * qh, o.q_lora);
  }
  // The Markov bias is small beside the head's logits, as a trained one would be.
  t.push_back(random_bf16("markov_head.markov_w1.weight", {o.vocab, o.markov_rank}, rng, 1.0, 0.0));
  t.push_back(random_bf16("markov_head.markov_w2.weight", {o.vocab, o.markov_rank}, rng, 0.1 / std::sqrt(double(o.markov_rank)), 0.0));
  write_safetensors((fs::path(o.out_dir) / "model.safetensors").string(), t, {{"torchspec_version", "0.1.0"}});
  std::ofstream cfg(fs::path(o.out_dir) / "config.json");
  cfg << dspark_synth_config(o).dump(2) << "\n";
  if (!cfg) fail("synth: cannot write {}/config.json", o.out_dir);
}

}  // namespace sluice
