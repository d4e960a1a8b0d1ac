#include "store/synthetic.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <vector>

#include "format/dtype.h"
#include "util/atomic_file.h"
#include "util/disk_space.h"
#include "util/error.h"
#include "util/numeric.h"
#include "util/progress.h"

namespace sluice {

namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------- configs
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

// ---------------------------------------------------------------- tensors
enum class Init { Normal, Norm, Bias, Codes, Mxfp4Scale, Fp8, Fp8Scale, Int4Scale, ALog, DtBias, Shape };

struct Spec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  Init init;
  double a = 0;  // std for Normal/Bias; scale value / byte for the scale kinds; heads for ALog
  int shard = 0;
  uint64_t bytes() const {
    uint64_t n = uint64_t(dtype_size(dtype));
    for (auto d : shape) n *= uint64_t(d);
    return n;
  }
};

struct Layout {
  std::vector<Spec> t;
  int shard = 0;
  void mat(const std::string& n, int64_t r, int64_t c, double std = -1) {
    t.push_back({n, DType::BF16, {r, c}, Init::Normal, std < 0 ? 1.0 / std::sqrt(double(c)) : std, shard});
  }
  void norm(const std::string& n, int64_t d, DType dt = DType::BF16) { t.push_back({n, dt, {d}, Init::Norm, 0, shard}); }
  void vec(const std::string& n, std::vector<int64_t> shape, Init init, double a, DType dt) {
    t.push_back({n, dt, std::move(shape), init, a, shard});
  }
  // Mxfp4 compressed-tensors (K3), scale bytes centred so values are ~N(0, 1/fan_in).
  void mxfp4(const std::string& base, int64_t r, int64_t c) {
    const double centre = 127 + std::round(std::log2(1.0 / (std::sqrt(double(c)) * 2.926)));
    t.push_back({base + ".weight_packed", DType::U8, {r, c / 2}, Init::Codes, 0, shard});
    t.push_back({base + ".weight_scale", DType::U8, {r, c / 32}, Init::Mxfp4Scale, centre, shard});
  }
  void expert(const std::string& base, int64_t r, int64_t c, const std::string& fmt) {
    if (fmt == "fp8") {
      t.push_back({base + ".weight", DType::F8_E4M3, {r, c}, Init::Fp8, 0, shard});
      t.push_back({base + ".weight_scale_inv", DType::F32, {(r + 127) / 128, (c + 127) / 128}, Init::Fp8Scale,
                   1.0 / std::sqrt(double(c)), shard});
    } else if (fmt == "int4") {
      t.push_back({base + ".weight_packed", DType::I32, {r, c / 8}, Init::Codes, 0, shard});
      t.push_back({base + ".weight_scale", DType::BF16, {r, c / 32}, Init::Int4Scale, 1.0 / (std::sqrt(double(c)) * 4.6), shard});
      t.push_back({base + ".weight_shape", DType::I32, {2}, Init::Shape, double(r) * 1e6 + double(c), shard});
    } else {
      mat(base + ".weight", r, c);
    }
  }
};

std::vector<Spec> deepseek_tensors(const json& c) {
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
    const std::string P = "model.layers." + std::to_string(l) + ".";
    L.norm(P + "input_layernorm.weight", D);
    L.norm(P + "post_attention_layernorm.weight", D);
    L.expert(P + "self_attn.q_a_proj", ql, D, dense_fmt);
    L.norm(P + "self_attn.q_a_layernorm.weight", ql);
    L.expert(P + "self_attn.q_b_proj", H * (nope + rope), ql, dense_fmt);
    L.expert(P + "self_attn.kv_a_proj_with_mqa", kl + rope, D, dense_fmt);
    L.norm(P + "self_attn.kv_a_layernorm.weight", kl);
    L.expert(P + "self_attn.kv_b_proj", H * (nope + v), kl, dense_fmt);
    L.expert(P + "self_attn.o_proj", D, H * v, dense_fmt);
    if (l < fk) {
      L.expert(P + "mlp.gate_proj", DI, D, dense_fmt);
      L.expert(P + "mlp.up_proj", DI, D, dense_fmt);
      L.expert(P + "mlp.down_proj", D, DI, dense_fmt);
      continue;
    }
    L.mat(P + "mlp.gate.weight", E, D);
    L.vec(P + "mlp.gate.e_score_correction_bias", {E}, Init::Bias, 0.1, DType::F32);
    const int64_t S = I * c["n_shared_experts"].get<int64_t>();
    L.expert(P + "mlp.shared_experts.gate_proj", S, D, dense_fmt);
    L.expert(P + "mlp.shared_experts.up_proj", S, D, dense_fmt);
    L.expert(P + "mlp.shared_experts.down_proj", D, S, dense_fmt);
    for (int64_t e = 0; e < E; ++e) {
      const std::string X = P + "mlp.experts." + std::to_string(e) + ".";
      L.expert(X + "gate_proj", I, D, fmt);
      L.expert(X + "up_proj", I, D, fmt);
      L.expert(X + "down_proj", D, I, fmt);
    }
  }
  L.shard = int(NL);
  const int64_t V = c["vocab_size"];
  L.mat("model.embed_tokens.weight", V, D, 1.0);
  L.mat("lm_head.weight", V, D);
  L.norm("model.norm.weight", D);
  return L.t;
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

std::vector<Spec> k3_tensors(const json& top) {
  const json& c = top["text_config"];
  Layout L;
  const int64_t D = c["hidden_size"], H = c["num_attention_heads"], ql = c["q_lora_rank"], kl = c["kv_lora_rank"];
  const int64_t nope = c["qk_nope_head_dim"], rope = c["qk_rope_head_dim"], v = c["v_head_dim"];
  const int64_t E = c["num_experts"], I = c["moe_intermediate_size"], DI = c["intermediate_size"];
  const int64_t LW = c["routed_expert_hidden_size"], NL = c["num_hidden_layers"];
  const json& lac = c["linear_attn_config"];
  const int64_t KH = lac["num_heads"], KD = lac["head_dim"], C = KH * KD;
  std::vector<bool> mla(size_t(NL), false);
  for (int64_t id : lac["full_attn_layers"]) mla[size_t(id - 1)] = true;
  const std::string M = "language_model.model.";
  for (int64_t l = 0; l < NL; ++l) {
    L.shard = int(l);
    const std::string P = M + "layers." + std::to_string(l) + ".";
    L.norm(P + "input_layernorm.weight", D);
    L.norm(P + "post_attention_layernorm.weight", D);
    L.norm(P + "self_attention_res_norm.weight", D);
    L.mat(P + "self_attention_res_proj.weight", 1, D);
    L.norm(P + "mlp_res_norm.weight", D);
    L.mat(P + "mlp_res_proj.weight", 1, D);
    const std::string A = P + "self_attn.";
    if (!mla[size_t(l)]) {
      for (const char* p : {"q_proj", "k_proj", "v_proj", "g_proj"}) L.mat(A + p + ".weight", C, D);
      for (const char* p : {"q_conv1d", "k_conv1d", "v_conv1d"})
        L.vec(A + p + ".weight", {C, 1, 4}, Init::Bias, 0.5, DType::F32);
      L.mat(A + "f_a_proj.weight", KD, D);
      L.mat(A + "f_b_proj.weight", C, KD);
      L.vec(A + "dt_bias", {C}, Init::DtBias, 0, DType::F32);
      L.vec(A + "A_log", {std::max(KD, KH)}, Init::ALog, double(KH), DType::F32);
      L.mat(A + "b_proj.weight", KH, D);
      L.norm(A + "o_norm.weight", KD, DType::F32);
      L.mat(A + "o_proj.weight", D, C);
    } else {
      L.mat(A + "q_a_proj.weight", ql, D);
      L.norm(A + "q_a_layernorm.weight", ql);
      L.mat(A + "q_b_proj.weight", H * (nope + rope), ql);
      L.mat(A + "kv_a_proj_with_mqa.weight", kl + rope, D);
      L.norm(A + "kv_a_layernorm.weight", kl);
      L.mat(A + "kv_b_proj.weight", H * (nope + v), kl);
      L.mat(A + "g_proj.weight", H * v, D);
      L.mat(A + "o_proj.weight", D, H * v);
    }
    if (l < c["first_k_dense_replace"].get<int64_t>()) {
      L.mat(P + "mlp.gate_proj.weight", DI, D);
      L.mat(P + "mlp.up_proj.weight", DI, D);
      L.mat(P + "mlp.down_proj.weight", D, DI);
      continue;
    }
    const std::string B = P + "block_sparse_moe.";
    L.mat(B + "gate.weight", E, D);
    L.vec(B + "gate.e_score_correction_bias", {E}, Init::Bias, 0.15, DType::F32);
    L.mat(B + "routed_expert_down_proj.weight", LW, D);
    L.norm(B + "routed_expert_norm.weight", LW);
    L.mat(B + "routed_expert_up_proj.weight", D, LW);
    const int64_t S = I * c["num_shared_experts"].get<int64_t>();
    L.mat(B + "shared_experts.gate_proj.weight", S, D);
    L.mat(B + "shared_experts.up_proj.weight", S, D);
    L.mat(B + "shared_experts.down_proj.weight", D, S);
    for (int64_t e = 0; e < E; ++e) {
      const std::string X = B + "experts." + std::to_string(e) + ".";
      L.mxfp4(X + "w1", I, LW);
      L.mxfp4(X + "w2", LW, I);
      L.mxfp4(X + "w3", I, LW);
    }
  }
  L.shard = int(NL);
  const int64_t V = c["vocab_size"];
  L.mat(M + "embed_tokens.weight", V, D, 1.0);
  L.mat("language_model.lm_head.weight", V, D);
  L.norm(M + "norm.weight", D);
  L.norm(M + "output_attn_res_norm.weight", D);
  L.mat(M + "output_attn_res_proj.weight", 1, D);
  return L.t;
}

// ---------------------------------------------------------------- data
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint64_t next() {  // splitmix64
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  // Uniform with the given standard deviation (cheap stand-in for a normal).
  double centred(double std) { return (2.0 * uniform() - 1.0) * std * 1.7320508075688772; }
};

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

void put(std::vector<uint8_t>& out, const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

// Generates the tensor's bytes in chunks, calling sink(bytes) for each.
template <class Sink>
void generate(const Spec& s, uint64_t seed, RoutingStructure* routing, Sink&& sink) {
  Rng rng(name_hash(s.name) ^ seed);
  const RoutingRole role = routing ? routing_role(s.name) : RoutingRole::None;
  if (role != RoutingRole::None) routing->begin(role, s.name);
  const int64_t cols = s.shape.empty() ? 1 : s.shape.back();
  const uint64_t total = s.bytes();
  std::vector<uint8_t> buf;
  buf.reserve(1 << 22);
  const int64_t rows = s.shape.empty() ? 1 : s.shape[0];
  const int64_t row_len = rows ? int64_t(total / uint64_t(dtype_size(s.dtype))) / std::max<int64_t>(rows, 1) : 0;
  uint64_t emitted = 0, index = 0;
  auto flush = [&](bool force) {
    if (buf.size() >= (1u << 22) || (force && !buf.empty())) {
      emitted += buf.size();
      sink(buf);
      buf.clear();
    }
  };
  const uint64_t count = total / uint64_t(dtype_size(s.dtype));
  for (; index < count; ++index) {
    switch (s.init) {
      case Init::Normal:
      case Init::Bias:
      case Init::Norm:
      case Init::DtBias: {
        double v = s.init == Init::Norm ? 1.0 + rng.centred(0.05)
                   : s.init == Init::DtBias ? -2.0 + rng.centred(1.0)
                                             : rng.centred(s.a);
        if (role == RoutingRole::RouterBias) {
          v = routing->bias(int64_t(index));
        } else if (role != RoutingRole::None && s.init == Init::Normal) {
          const int64_t col = int64_t(index) % cols;
          v = col < routing->dims() ? routing->value(int64_t(index) / cols, col) : v * routing->rest_scale();
        }
        if (s.dtype == DType::F32) {
          float f = float(v);
          put(buf, &f, 4);
        } else {
          uint16_t h = f32_to_bf16(float(v));
          put(buf, &h, 2);
        }
        break;
      }
      case Init::ALog: {
        float f = int64_t(index) < int64_t(s.a) ? float((rng.uniform() < 0.5 ? -1 : 1) * (0.4 + 0.8 * rng.uniform())) : 0.0f;
        put(buf, &f, 4);
        break;
      }
      case Init::Codes: {  // packed nibbles (MXFP4 codes or INT4 values), 8 bytes per step where possible
        if (dtype_size(s.dtype) == 4) {
          uint32_t w = uint32_t(rng.next());
          put(buf, &w, 4);
        } else {
          uint64_t w = rng.next();
          const uint64_t n = std::min<uint64_t>(8, count - index);
          put(buf, &w, n);
          index += n - 1;
        }
        break;
      }
      case Init::Mxfp4Scale: {
        uint8_t b = uint8_t(s.a + double(int(rng.next() % 3) - 1));
        buf.push_back(b);
        break;
      }
      case Init::Fp8: {  // magnitudes in [0.5, 2): exponent 6 or 7, any mantissa, random sign
        uint64_t r = rng.next();
        uint8_t b = uint8_t(((r & 1) << 7) | ((6 + ((r >> 1) & 1)) << 3) | ((r >> 2) & 7));
        buf.push_back(b);
        break;
      }
      case Init::Fp8Scale: {
        float f = float(s.a);
        put(buf, &f, 4);
        break;
      }
      case Init::Int4Scale: {
        uint16_t h = f32_to_bf16(float(s.a * (0.9 + 0.2 * rng.uniform())));
        put(buf, &h, 2);
        break;
      }
      case Init::Shape: {
        int32_t v[2] = {int32_t(s.shape.size() ? int64_t(s.a / 1e6) : 0), int32_t(int64_t(s.a) % 1000000)};
        put(buf, &v[index], 4);
        break;
      }
    }
    flush(false);
  }
  (void)row_len;
  flush(true);
  if (emitted != total) fail("synth: internal size mismatch for {}", s.name);
}

int dtype_rank(DType d) {  // safetensors writes larger dtypes first, then by name
  switch (d) {
    case DType::F64: return 12;
    case DType::I64: return 11;
    case DType::F32: return 10;
    case DType::I32: return 9;
    case DType::BF16: return 8;
    case DType::F16: return 7;
    case DType::I16: return 6;
    case DType::F8_E4M3: return 5;
    case DType::F8_E5M2: return 4;
    case DType::F8_E8M0: return 3;
    case DType::I8: return 2;
    case DType::U8: return 1;
    case DType::BOOL: return 0;
  }
  return 0;
}

}  // namespace

json synth_config(const SynthOptions& o) {
  const bool real = o.preset == "real";
  if (!real && o.preset != "small") fail("synth: --preset must be 'real' or 'small', got '{}'", o.preset);
  if (o.arch == "deepseek_v3" || o.arch == "kimi_k2") return deepseek_config(o, real);
  if (o.arch == "qwen3_moe") return qwen_config(o, real);
  if (o.arch == "kimi_k3") return k3_config(o, real);
  fail("synth: --arch '{}' is not supported (deepseek_v3, kimi_k2, qwen3_moe, kimi_k3 are)", o.arch);
}

namespace {
std::vector<Spec> synth_specs(const SynthOptions& o, const json& cfg) {
  return o.arch == "kimi_k3" ? k3_tensors(cfg) : o.arch == "qwen3_moe" ? qwen_tensors(cfg) : deepseek_tensors(cfg);
}
}  // namespace

std::string synth_routing_label(const SynthOptions& o) {
  if (o.routing == "random") return "random (i.i.d. router rows)";
  const RealisticRouting& p = o.realistic;
  return fmt::format("realistic (hot_fraction {} hot_bias {} step {} sharpness {} router_noise {} amplitude {} "
                     "lm_sharpness {} lm_noise {})",
                     p.hot_fraction, p.hot_bias, p.step, p.sharpness, p.router_noise, p.amplitude, p.lm_sharpness,
                     p.lm_noise);
}

namespace {
// The realistic routing's structure for this model, or none for random routing.
std::unique_ptr<RoutingStructure> routing_structure(const SynthOptions& o, const json& cfg) {
  if (o.routing == "random") return nullptr;
  if (o.routing != "realistic") fail("synth: --routing must be 'random' or 'realistic', got '{}'", o.routing);
  if (o.arch == "qwen3_moe")
    fail("synth: --routing realistic needs a router score-correction bias (deepseek_v3, kimi_k2, kimi_k3); "
         "qwen3_moe has none");
  const json& c = o.arch == "kimi_k3" ? cfg["text_config"] : cfg;
  const int64_t E = o.arch == "kimi_k3" ? c["num_experts"].get<int64_t>() : c["n_routed_experts"].get<int64_t>();
  const int64_t K = o.arch == "kimi_k3" ? c["num_experts_per_token"].get<int64_t>() : c["num_experts_per_tok"].get<int64_t>();
  return std::make_unique<RoutingStructure>(o.realistic, o.seed, c["hidden_size"].get<int64_t>(), E, K);
}
}  // namespace

uint64_t synth_bytes(const SynthOptions& o) {
  uint64_t total = 0;
  for (const auto& s : synth_specs(o, synth_config(o))) total += s.bytes();
  return total;
}

uint64_t synthesize(const SynthOptions& o) {
  namespace fs = std::filesystem;
  json cfg = synth_config(o);
  std::vector<Spec> specs = synth_specs(o, cfg);
  std::unique_ptr<RoutingStructure> routing = routing_structure(o, cfg);
  int nshards = 0;
  uint64_t total = 0;
  for (const auto& s : specs) {
    nshards = std::max(nshards, s.shard + 1);
    total += s.bytes();
  }
  require_free_disk(o.out_dir, total, fmt::format("synth --arch {} --preset {}", o.arch, o.preset));
  fs::create_directories(o.out_dir);
  auto shard_name = [&](int i) { return fmt::format("model-{:05d}-of-{:06d}.safetensors", i + 1, nshards); };
  Progress progress("synth", total, o.progress);
  json weight_map = json::object();
  uint64_t written = 0;
  for (int sh = 0; sh < nshards; ++sh) {
    std::vector<const Spec*> mine;
    for (const auto& s : specs)
      if (s.shard == sh) mine.push_back(&s);
    std::sort(mine.begin(), mine.end(), [](const Spec* a, const Spec* b) {
      return dtype_rank(a->dtype) != dtype_rank(b->dtype) ? dtype_rank(a->dtype) > dtype_rank(b->dtype)
                                                          : a->name < b->name;
    });
    json header = json::object();
    header["__metadata__"] = {{"format", "pt"}, {"generator", "sluice synth"}, {"routing", synth_routing_label(o)}};
    uint64_t off = 0;
    for (const Spec* s : mine) {
      header[s->name] = {{"dtype", std::string(dtype_name(s->dtype))}, {"shape", s->shape}, {"data_offsets", {off, off + s->bytes()}}};
      off += s->bytes();
      weight_map[s->name] = shard_name(sh);
    }
    std::string hs = header.dump();
    while ((hs.size() + 8) % 8) hs.push_back(' ');
    const std::string path = (fs::path(o.out_dir) / shard_name(sh)).string();
    AtomicFile f(path);
    const uint64_t n = hs.size();
    f.write(&n, 8);
    f.write(hs.data(), hs.size());
    for (const Spec* s : mine)
      generate(*s, o.seed, routing.get(), [&](const std::vector<uint8_t>& b) {
        f.write(b.data(), b.size());
        written += b.size();
        progress.update(written);
      });
    f.commit();
  }
  progress.finish();
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  std::ofstream(fs::path(o.out_dir) / "model.safetensors.index.json") << index.dump(2) << "\n";
  std::ofstream(fs::path(o.out_dir) / "config.json") << cfg.dump(2) << "\n";
  return total;
}

}  // namespace sluice
