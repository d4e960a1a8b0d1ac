// Writes a small DeepSeek-V3 checkpoint for the server tests.
//   make_test_model OUT_DIR VOCAB EOS_ID [SCRIPT]
//   make_test_model OUT_DIR VOCAB EOS_ID --starts S1,S2 --marker M|none SCRIPT_BEFORE SCRIPT_AFTER
// Random weights by default. With SCRIPT (comma-separated token ids, each at most
// once), the layers' outputs are zeroed and the embeddings and head are set so
// that after any token outside the script the model emits SCRIPT[0], after
// SCRIPT[i] it emits SCRIPT[i+1], and after the last one EOS_ID: a scripted
// reply, for testing tool-call parsing end to end.
// The second form scripts a two-turn agent session: after a start token (say the
// generation prompt's last token) the model writes SCRIPT_BEFORE when the context
// holds no MARKER token and SCRIPT_AFTER when it does (say a tool output's marker:
// a tool call first, then an answer once the tool's result is in). One attention
// head of the first layer finds the marker wherever it is (its key alone matches
// the head's constant query, and only its value is non-zero), and writes a flag
// into the residual stream that the head reads beside the last token.
// With --marker none the last token alone decides: SCRIPT_BEFORE after S1,
// SCRIPT_AFTER after S2 (a tool call for every user turn, an answer after each
// tool output).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/safetensors.h"
#include "util/numeric.h"

using namespace sluice;

namespace {

constexpr int64_t kLayers = 2, kExperts = 4, kInter = 96, kMoeInter = 32;
int64_t kHidden = 64;  // more for long scripts (a slot per scripted token)
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

std::vector<int32_t> ids(const std::string& s) {
  std::vector<int32_t> v;
  for (size_t p = 0; p < s.size();) {
    size_t q = s.find(',', p);
    if (q == std::string::npos) q = s.size();
    v.push_back(std::stoi(s.substr(p, q - p)));
    p = q + 1;
  }
  return v;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: make_test_model OUT_DIR VOCAB EOS_ID [SCRIPT]\n"
                 "       make_test_model OUT_DIR VOCAB EOS_ID --starts S1,S2 --marker M SCRIPT_BEFORE SCRIPT_AFTER\n");
    return 2;
  }
  const std::string out = argv[1];
  const int64_t vocab = std::stoll(argv[2]);
  const int32_t eos = std::stoi(argv[3]);
  std::vector<int32_t> script, after, starts;
  int32_t marker = -1;
  bool per_turn = false;
  if (argc > 4 && std::string(argv[4]) == "--starts") {
    if (argc != 10 || std::string(argv[6]) != "--marker") {
      std::fprintf(stderr, "make_test_model: --starts S1,S2 --marker M SCRIPT_BEFORE SCRIPT_AFTER\n");
      return 2;
    }
    starts = ids(argv[5]);
    per_turn = std::string(argv[7]) == "none";
    marker = per_turn ? -1 : std::stoi(argv[7]);
    if (per_turn && starts.size() != 2) {
      std::fprintf(stderr, "make_test_model: --marker none needs two start tokens\n");
      return 2;
    }
    script = ids(argv[8]);
    after = ids(argv[9]);
  } else if (argc > 4) {
    script = ids(argv[4]);
  }
  {
    std::set<int32_t> seen(script.begin(), script.end());
    seen.insert(after.begin(), after.end());
    seen.insert(starts.begin(), starts.end());
    const size_t n = script.size() + after.size() + starts.size();
    if (seen.size() != n || seen.count(eos) || (marker >= 0 && seen.count(marker))) {
      std::fprintf(stderr, "make_test_model: the scripts and start tokens need distinct ids (not EOS, not the marker)\n");
      return 2;
    }
    // A slot per scripted token, start token and the marker, one for "anything else", one for the flag.
    while (int64_t(n) + 3 > kHidden) kHidden += 64;
  }
  const bool scripted = !script.empty();
  std::map<int32_t, int64_t> slots;
  for (const auto* s : {&script, &after, &starts})
    for (int32_t t : *s) slots.emplace(t, int64_t(slots.size()));
  if (marker >= 0) slots.emplace(marker, int64_t(slots.size()));
  auto slot_of = [&](int32_t t) -> int64_t {
    auto it = slots.find(t);
    return it == slots.end() ? kHidden - 1 : it->second;
  };
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
    const bool finder = marker >= 0 && l == 0;  // this layer's first head finds the marker
    ts.push_back(tensor(P + "self_attn.q_proj.weight", {kHeads * (kNope + kRope), kHidden}, w, finder));
    ts.push_back(tensor(P + "self_attn.kv_a_proj_with_mqa.weight", {kKvLora + kRope, kHidden}, w, finder));
    ts.push_back(tensor(P + "self_attn.kv_a_layernorm.weight", {kKvLora}, 0, true, 1));
    ts.push_back(tensor(P + "self_attn.kv_b_proj.weight", {kHeads * (kNope + kV), kKvLora}, w, finder));
    ts.push_back(tensor(P + "self_attn.o_proj.weight", {kHidden, kHeads * kV}, w, scripted));
    if (finder) {
      auto at = [&](size_t back, int64_t row, int64_t col, int64_t cols, float v) {
        reinterpret_cast<uint16_t*>(ts[ts.size() - back].bytes.data())[row * cols + col] = f32_to_bf16(v);
      };
      // Every token's normalised embedding is one slot at sqrt(hidden): the query of
      // head 0 is the same for all (its first nope dimension); the latent is 1 in its
      // first dimension for the marker and in its second for anything else; the marker's
      // latent gives a key along the query (a score of 37 or more after scaling) and a value in
      // the head's first value dimension; o_proj copies that into the flag slot.
      for (int64_t c = 0; c < kHidden; ++c) {
        at(5, 0, c, kHidden, 1.f);  // q_proj row 0 (head 0, nope 0)
        at(4, 1, c, kHidden, 1.f);  // kv_a row 1: "not the marker"
      }
      at(4, 1, slot_of(marker), kHidden, 0.f);
      at(4, 0, slot_of(marker), kHidden, 1.f);
      at(2, 0, 0, kKvLora, 4.f);         // kv_b: head 0 k_nope 0 <- latent 0
      at(2, kNope, 0, kKvLora, 0.25f);  // kv_b: head 0 v 0 <- latent 0 (normalised: sqrt(32) * 0.25 = 1.41)
      at(1, kHidden - 2, 0, kHeads * kV, 1.f);  // o_proj: flag slot <- head 0 v 0
    }
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
    // Slot slot_of(t): "the last token was t" for scripted and start tokens; slot
    // kHidden-1: anything else; slot kHidden-2: the marker flag.
    auto set = [](TensorData& t, int64_t row, int64_t col, float v) {
      reinterpret_cast<uint16_t*>(t.bytes.data())[row * kHidden + col] = f32_to_bf16(v);
    };
    // The head's weights below times kSharp: the replies are sampled at the APIs' default
    // temperature 1, and a marker flag's pull toward SCRIPT_AFTER[0] at every step of the
    // answer is a margin of ~5.5 at weight 1 (a stray token in ~0.4% of the steps), ~11 at 2.
    // Kept small enough that logit_bias -100 still forbids EOS after a script (2 * 4 * sqrt(hidden):
    // 64 at hidden 64, 91 at 128).
    constexpr float kSharp = 2.f;
    auto head_set = [&](int64_t row, int64_t col, float v) { set(head, row, col, kSharp * v); };
    for (int64_t t = 0; t < vocab; ++t) set(embed, t, slot_of(int32_t(t)), 1.f);
    auto chain = [&](const std::vector<int32_t>& s) {
      for (size_t k = 0; k < s.size(); ++k) head_set(k + 1 < s.size() ? s[k + 1] : eos, slot_of(s[k]), 4.f);
    };
    chain(script);
    chain(after);
    if (starts.empty()) {
      head_set(script[0], kHidden - 1, 4.f);
    } else if (per_turn) {
      head_set(script[0], slot_of(starts[0]), 4.f);
      head_set(after[0], slot_of(starts[1]), 4.f);
    } else {
      // After a start token: SCRIPT_BEFORE without the flag (4 - 2 against 3), SCRIPT_AFTER
      // with it (2 against 3 + 2). A flag alone never outweighs a scripted step (4).
      for (int32_t st : starts) {
        head_set(script[0], slot_of(st), 4.f);
        head_set(after[0], slot_of(st), 3.f);
      }
      head_set(script[0], kHidden - 2, -2.f);
      head_set(after[0], kHidden - 2, 2.f);
    }
  }
  ts.push_back(std::move(embed));
  ts.push_back(std::move(head));
  write_safetensors(out + "/model.safetensors", ts);
  std::printf("%s\n", out.c_str());
  return 0;
}
