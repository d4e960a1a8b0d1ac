// Writes a small DeepSeek-V3 checkpoint for the server tests.
//   make_test_model OUT_DIR VOCAB EOS_ID [SCRIPT]
// Random weights by default. With SCRIPT (comma-separated token ids, each at most
// once), the layers' outputs are zeroed and the embeddings and head are set so
// that after any token outside the script the model emits SCRIPT[0], after
// SCRIPT[i] it emits SCRIPT[i+1], and after the last one EOS_ID: a scripted
// reply, for testing tool-call parsing end to end.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/safetensors.h"
#include "util/numeric.h"

using namespace sluice;

namespace {

constexpr int64_t kHidden = 64, kLayers = 2, kExperts = 4, kInter = 96, kMoeInter = 32;
constexpr int64_t kHeads = 2, kKvLora = 32, kNope = 16, kRope = 8, kV = 16;

std::mt19937_64 rng(1234);

TensorData tensor(const std::string& name, std::vector<int64_t> shape, float scale, bool zero = false,
                  float fill = 0.f) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  std::normal_distribution<float> nd(0.f, scale);
  TensorData t{name, DType::BF16, shape, std::vector<uint8_t>(size_t(n) * 2)};
  auto* p = reinterpret_cast<uint16_t*>(t.bytes.data());
  for (int64_t i = 0; i < n; ++i) p[i] = f32_to_bf16(zero ? fill : nd(rng));
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: make_test_model OUT_DIR VOCAB EOS_ID [SCRIPT]\n");
    return 2;
  }
  const std::string out = argv[1];
  const int64_t vocab = std::stoll(argv[2]);
  const int32_t eos = std::stoi(argv[3]);
  std::vector<int32_t> script;
  if (argc > 4) {
    std::string s = argv[4];
    for (size_t p = 0; p < s.size();) {
      size_t q = s.find(',', p);
      if (q == std::string::npos) q = s.size();
      script.push_back(std::stoi(s.substr(p, q - p)));
      p = q + 1;
    }
    std::set<int32_t> seen(script.begin(), script.end());
    if (seen.size() != script.size() || seen.count(eos) || int64_t(script.size()) >= kHidden) {
      std::fprintf(stderr, "make_test_model: the script needs distinct ids (not EOS), fewer than %lld\n",
                   (long long)kHidden);
      return 2;
    }
  }
  const bool scripted = !script.empty();
  std::filesystem::create_directories(out);

  nlohmann::json cfg = {{"architectures", {"DeepseekV3ForCausalLM"}},
                        {"model_type", "deepseek_v3"},
                        {"vocab_size", vocab},
                        {"hidden_size", kHidden},
                        {"intermediate_size", kInter},
                        {"moe_intermediate_size", kMoeInter},
                        {"num_hidden_layers", kLayers},
                        {"num_attention_heads", kHeads},
                        {"num_key_value_heads", kHeads},
                        {"q_lora_rank", nullptr},
                        {"kv_lora_rank", kKvLora},
                        {"qk_nope_head_dim", kNope},
                        {"qk_rope_head_dim", kRope},
                        {"v_head_dim", kV},
                        {"n_routed_experts", kExperts},
                        {"n_shared_experts", 1},
                        {"num_experts_per_tok", 2},
                        {"n_group", 1},
                        {"topk_group", 1},
                        {"first_k_dense_replace", 1},
                        {"moe_layer_freq", 1},
                        {"norm_topk_prob", true},
                        {"routed_scaling_factor", 1.0},
                        {"scoring_func", "sigmoid"},
                        {"topk_method", "noaux_tc"},
                        {"hidden_act", "silu"},
                        {"rms_norm_eps", 1e-6},
                        {"rope_theta", 10000.0},
                        {"rope_scaling", nullptr},
                        {"max_position_embeddings", 65536},
                        {"bos_token_id", 0},
                        {"eos_token_id", eos},
                        {"tie_word_embeddings", false},
                        {"torch_dtype", "bfloat16"}};
  std::ofstream(out + "/config.json") << cfg.dump(2) << "\n";

  const float w = 0.08f;
  std::vector<TensorData> ts;
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string P = "model.layers." + std::to_string(l) + ".";
    ts.push_back(tensor(P + "input_layernorm.weight", {kHidden}, 0, true, 1));
    ts.push_back(tensor(P + "post_attention_layernorm.weight", {kHidden}, 0, true, 1));
    ts.push_back(tensor(P + "self_attn.q_proj.weight", {kHeads * (kNope + kRope), kHidden}, w));
    ts.push_back(tensor(P + "self_attn.kv_a_proj_with_mqa.weight", {kKvLora + kRope, kHidden}, w));
    ts.push_back(tensor(P + "self_attn.kv_a_layernorm.weight", {kKvLora}, 0, true, 1));
    ts.push_back(tensor(P + "self_attn.kv_b_proj.weight", {kHeads * (kNope + kV), kKvLora}, w));
    ts.push_back(tensor(P + "self_attn.o_proj.weight", {kHidden, kHeads * kV}, w, scripted));
    if (l == 0) {
      ts.push_back(tensor(P + "mlp.gate_proj.weight", {kInter, kHidden}, w));
      ts.push_back(tensor(P + "mlp.up_proj.weight", {kInter, kHidden}, w));
      ts.push_back(tensor(P + "mlp.down_proj.weight", {kHidden, kInter}, w, scripted));
    } else {
      ts.push_back(tensor(P + "mlp.gate.weight", {kExperts, kHidden}, w));
      ts.push_back(tensor(P + "mlp.gate.e_score_correction_bias", {kExperts}, 0, true, 0));
      for (int64_t e = 0; e < kExperts; ++e) {
        const std::string X = P + "mlp.experts." + std::to_string(e) + ".";
        ts.push_back(tensor(X + "gate_proj.weight", {kMoeInter, kHidden}, w));
        ts.push_back(tensor(X + "up_proj.weight", {kMoeInter, kHidden}, w));
        ts.push_back(tensor(X + "down_proj.weight", {kHidden, kMoeInter}, w, scripted));
      }
      ts.push_back(tensor(P + "mlp.shared_experts.gate_proj.weight", {kMoeInter, kHidden}, w));
      ts.push_back(tensor(P + "mlp.shared_experts.up_proj.weight", {kMoeInter, kHidden}, w));
      ts.push_back(tensor(P + "mlp.shared_experts.down_proj.weight", {kHidden, kMoeInter}, w, scripted));
    }
  }
  ts.push_back(tensor("model.norm.weight", {kHidden}, 0, true, 1));
  TensorData embed = tensor("model.embed_tokens.weight", {vocab, kHidden}, 1.0f, scripted);
  TensorData head = tensor("lm_head.weight", {vocab, kHidden}, 0.3f, scripted);
  if (scripted) {
    // Slot k < script size: "the last token was script[k]"; slot kHidden-1: anything else.
    auto set = [](TensorData& t, int64_t row, int64_t col, float v) {
      reinterpret_cast<uint16_t*>(t.bytes.data())[row * kHidden + col] = f32_to_bf16(v);
    };
    std::vector<int64_t> slot(size_t(vocab), kHidden - 1);
    for (size_t k = 0; k < script.size(); ++k) slot[size_t(script[k])] = int64_t(k);
    for (int64_t t = 0; t < vocab; ++t) set(embed, t, slot[size_t(t)], 1.f);
    set(head, script[0], kHidden - 1, 4.f);
    for (size_t k = 0; k < script.size(); ++k) set(head, k + 1 < script.size() ? script[k + 1] : eos, int64_t(k), 4.f);
  }
  ts.push_back(std::move(embed));
  ts.push_back(std::move(head));
  write_safetensors(out + "/model.safetensors", ts);
  std::printf("%s\n", out.c_str());
  return 0;
}
