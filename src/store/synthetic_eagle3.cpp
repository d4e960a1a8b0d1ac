#include "store/synthetic_eagle3.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>

#include "format/safetensors.h"
#include "store/random_bf16.h"
#include "util/error.h"

namespace sluice {

Eagle3SynthOptions eagle3_synth_for_target(int64_t target_hidden, int64_t target_vocab, int64_t target_layers) {
  Eagle3SynthOptions o;
  o.hidden = target_hidden;
  o.vocab = o.draft_vocab = target_vocab;
  o.intermediate = 2 * target_hidden;
  o.heads = 4;
  o.q_lora = 64;
  o.kv_lora = 32;
  o.nope = 32;
  o.rope_dim = 16;
  o.v_dim = 32;
  o.aux_ids.clear();
  // Outputs of K3's layers 1/45/89 of 93, scaled; as aux ids (inputs of the next layer).
  for (int64_t k3 : {1, 45, 89}) o.aux_ids.push_back(k3 * target_layers / 93 + 1);
  return o;
}

nlohmann::json eagle3_synth_config(const Eagle3SynthOptions& o) {
  return {{"architectures", {"Eagle3DeepseekV2ForCausalLM"}},
          {"model_type", "kimi_k2"},
          {"hidden_size", o.hidden},
          {"intermediate_size", o.intermediate},
          {"num_hidden_layers", 1},
          {"num_attention_heads", o.heads},
          {"num_key_value_heads", o.heads},
          {"q_lora_rank", o.q_lora},
          {"kv_lora_rank", o.kv_lora},
          {"qk_nope_head_dim", o.nope},
          {"qk_rope_head_dim", o.rope_dim},
          {"v_head_dim", o.v_dim},
          {"vocab_size", o.vocab},
          {"draft_vocab_size", o.draft_vocab},
          {"target_hidden_size", o.hidden},
          {"rms_norm_eps", 1e-05},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false},
          {"max_position_embeddings", 131072},
          {"eagle_config", {{"eagle_aux_hidden_state_layer_ids", o.aux_ids}}},
          {"rope_scaling",
           {{"type", "yarn"},
            {"factor", 32.0},
            {"original_max_position_embeddings", 4096},
            {"beta_fast", 32},
            {"beta_slow", 1},
            {"mscale", 1.0},
            {"mscale_all_dim", 1.0}}},
          {"rope_theta", 50000.0}};
}

void synthesize_eagle3(const Eagle3SynthOptions& o) {
  namespace fs = std::filesystem;
  if (o.draft_vocab <= 0 || o.draft_vocab > o.vocab) fail("synth: draft vocabulary {} not in [1, {}]", o.draft_vocab, o.vocab);
  fs::create_directories(o.out_dir);
  std::mt19937_64 rng(o.seed);
  const int64_t H = o.hidden, taps = int64_t(o.aux_ids.size()), qh = o.nope + o.rope_dim;
  std::vector<TensorData> t;
  auto linear = [&](const std::string& name, int64_t rows, int64_t cols) {
    t.push_back(random_bf16(name, {rows, cols}, rng, 1.0 / std::sqrt(double(cols)), 0.0));
  };
  auto norm = [&](const std::string& name, int64_t n) { t.push_back(random_bf16(name, {n}, rng, 0.05, 1.0)); };
  t.push_back(random_bf16("embed_tokens.weight", {o.vocab, H}, rng, 1.0, 0.0));  // borrowed from the target when loaded
  linear("fc.weight", H, taps * H);
  if (o.fc_norms)
    for (int64_t j = 0; j < taps; ++j) norm(fmt::format("fc_norm.{}.weight", j), H);
  const std::string L = "layers.0.", A = L + "self_attn.";
  norm(L + "hidden_norm.weight", H);
  norm(L + "input_layernorm.weight", H);
  norm(L + "post_attention_layernorm.weight", H);
  linear(A + "q_a_proj.weight", o.q_lora, 2 * H);
  norm(A + "q_a_layernorm.weight", o.q_lora);
  linear(A + "q_b_proj.weight", o.heads * qh, o.q_lora);
  linear(A + "kv_a_proj_with_mqa.weight", o.kv_lora + o.rope_dim, 2 * H);
  norm(A + "kv_a_layernorm.weight", o.kv_lora);
  linear(A + "kv_b_proj.weight", o.heads * (o.nope + o.v_dim), o.kv_lora);
  linear(A + "o_proj.weight", H, o.heads * o.v_dim);
  linear(L + "mlp.gate_proj.weight", o.intermediate, H);
  linear(L + "mlp.up_proj.weight", o.intermediate, H);
  linear(L + "mlp.down_proj.weight", H, o.intermediate);
  norm("norm.weight", H);
  linear("lm_head.weight", o.draft_vocab, H);
  if (o.draft_vocab < o.vocab) {
    // Draft id d stands for target id d * (vocab / draft_vocab): d2t holds the difference.
    const int64_t step = o.vocab / o.draft_vocab;
    TensorData d{"d2t", DType::I64, {o.draft_vocab}, std::vector<uint8_t>(size_t(o.draft_vocab) * 8)};
    for (int64_t i = 0; i < o.draft_vocab; ++i) {
      const int64_t diff = i * step - i;
      std::memcpy(d.bytes.data() + 8 * i, &diff, 8);
    }
    t.push_back(std::move(d));
  }
  write_safetensors((fs::path(o.out_dir) / "model.safetensors").string(), t);
  std::ofstream cfg(fs::path(o.out_dir) / "config.json");
  cfg << eagle3_synth_config(o).dump(2) << "\n";
  if (!cfg) fail("synth: cannot write {}/config.json", o.out_dir);
}

}  // namespace sluice
