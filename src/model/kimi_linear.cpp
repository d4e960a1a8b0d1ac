// Kimi Linear (model_type kimi_linear): KDA layers with a NoPE MLA layer every
// few layers, dense first MLP, sigmoid-routed MoE with a shared expert.
#include <cmath>

#include "format/checkpoint.h"
#include "model/architectures.h"
#include "model/kda_attention.h"
#include "model/mla_attention.h"
#include "model/moe.h"
#include "model/residual_decoder.h"
#include "util/error.h"

namespace sluice {

namespace {

std::vector<float> a_log_per_head(const WeightLoader& W, const std::string& name, int64_t heads) {
  TensorView t = W.tensor(name);
  const float* v = W.vec(name, -1);
  if (t.numel() < heads) fail("{}: '{}' has {} values for {} heads", *t.file, t.name(), t.numel(), heads);
  for (int64_t i = heads; i < t.numel(); ++i)
    if (v[i] != 0.0f) fail("{}: '{}' padding beyond the first {} (per-head) values must be zero", *t.file, t.name(), heads);
  return std::vector<float>(v, v + heads);
}

}  // namespace

std::unique_ptr<Model> build_kimi_linear(const std::string& dir, const Config& cfg) {
  ModelInfo info = basic_model_info(cfg, "kimi_linear");
  auto model = std::make_unique<ResidualDecoder>(info, std::make_unique<Checkpoint>(dir), "");
  WeightLoader& W = model->weights();
  const int64_t D = info.hidden;
  const float eps = float(cfg.req_double("rms_norm_eps"));

  auto layer_types = cfg.get_strings("layer_types");
  if (int64_t(layer_types.size()) != info.n_layers)
    fail("{}: layer_types has {} entries for {} layers", cfg.source(), layer_types.size(), info.n_layers);
  auto mlp_types = cfg.get_strings("mlp_layer_types");
  if (!mlp_types.empty() && int64_t(mlp_types.size()) != info.n_layers)
    fail("{}: mlp_layer_types has {} entries for {} layers", cfg.source(), mlp_types.size(), info.n_layers);
  if (cfg.get_string("hidden_act", "silu") != "silu")
    fail("{}: hidden_act '{}' is not supported for kimi_linear (silu is)", cfg.source(), cfg.get_string("hidden_act", ""));
  GatedActivation act;

  KdaSpec ks;
  ks.n_heads = cfg.req_int("linear_num_heads");
  ks.head_dim = cfg.req_int("linear_head_dim");
  ks.conv_kernel = cfg.get_int("linear_conv_kernel_dim", 4);
  ks.gate = KdaSpec::Softplus;
  ks.norm_eps = eps;
  const int64_t C = ks.n_heads * ks.head_dim;

  MlaSpec ms;
  ms.n_heads = cfg.req_int("num_attention_heads");
  ms.q_lora = cfg.get_int("q_lora_rank", 0);
  ms.kv_lora = cfg.req_int("kv_lora_rank");
  ms.nope = cfg.req_int("qk_nope_head_dim");
  ms.rope_dim = cfg.req_int("qk_rope_head_dim");
  ms.v_dim = cfg.req_int("v_head_dim");
  ms.use_rope = false;  // Kimi Linear's MLA layers use no positional encoding
  ms.scale = float(1.0 / std::sqrt(double(ms.nope + ms.rope_dim)));
  const int64_t qh = ms.nope + ms.rope_dim;

  const int64_t E = cfg.req_int("num_experts");
  RouterSpec router;
  router.scoring = RouterSpec::SigmoidBiased;
  router.n_experts = E;
  router.top_k = cfg.req_int("num_experts_per_token");
  router.n_group = cfg.get_int("num_expert_group", 1);
  router.topk_group = cfg.get_int("topk_group", 1);
  router.renormalize = cfg.get_bool("moe_renormalize", true);
  router.scaling = float(cfg.get_double("routed_scaling_factor", 1.0));
  if (router.top_k < 1 || router.top_k > E || router.n_group < 1 || E % router.n_group)
    fail("{}: inconsistent routing: num_experts {}, num_experts_per_token {}, num_expert_group {}", cfg.source(), E,
         router.top_k, router.n_group);
  const int64_t first_dense = cfg.get_int("first_k_dense_replace", 0), freq = cfg.get_int("moe_layer_freq", 1);

  for (int64_t l = 0; l < info.n_layers; ++l) {
    const std::string P = fmt::format("model.layers.{}.", l);
    const std::string A = P + "self_attn.";
    ResidualDecoder::Layer L;
    L.attn_norm = W.vec(P + "input_layernorm.weight", D);
    L.ffn_norm = W.vec(P + "post_attention_layernorm.weight", D);
    if (layer_types[size_t(l)] == "linear_attention") {
      KdaWeights kw;
      kw.q = W.linear(A + "q_proj", C, D);
      kw.k = W.linear(A + "k_proj", C, D);
      kw.v = W.linear(A + "v_proj", C, D);
      kw.q_conv = W.vec(A + "q_conv1d.weight", C * ks.conv_kernel);
      kw.k_conv = W.vec(A + "k_conv1d.weight", C * ks.conv_kernel);
      kw.v_conv = W.vec(A + "v_conv1d.weight", C * ks.conv_kernel);
      kw.f_a = W.linear(A + "f_a_proj", -1, D);
      kw.f_b = W.linear(A + "f_b_proj", C, kw.f_a.rows);
      kw.b = W.linear(A + "b_proj", ks.n_heads, D);
      kw.g_a = W.linear(A + "g_a_proj", -1, D);
      kw.g_b = W.linear(A + "g_b_proj", C, kw.g_a.rows);
      kw.o = W.linear(A + "o_proj", D, C);
      kw.o_norm = W.vec(A + "o_norm.weight", ks.head_dim);
      kw.dt_bias = W.vec(A + "dt_bias", C);
      kw.a_log = a_log_per_head(W, A + "A_log", ks.n_heads);
      L.attn = std::make_unique<KdaAttention>(ks, std::move(kw));
    } else if (layer_types[size_t(l)] == "full_attention") {
      MlaWeights mw;
      if (ms.q_lora > 0) {
        mw.q_a = W.linear(A + "q_a_proj", ms.q_lora, D);
        mw.q_a_norm = W.vec(A + "q_a_layernorm.weight", ms.q_lora);
        mw.q_b = W.linear(A + "q_b_proj", ms.n_heads * qh, ms.q_lora);
      } else {
        mw.q = W.linear(A + "q_proj", ms.n_heads * qh, D);
      }
      mw.kv_a = W.linear(A + "kv_a_proj_with_mqa", ms.kv_lora + ms.rope_dim, D);
      mw.kv_a_norm = W.vec(A + "kv_a_layernorm.weight", ms.kv_lora);
      mw.kv_b = W.linear(A + "kv_b_proj", ms.n_heads * (ms.nope + ms.v_dim), ms.kv_lora);
      mw.o = W.linear(A + "o_proj", D, ms.n_heads * ms.v_dim);
      L.attn = std::make_unique<MlaAttention>(ms, mw);
    } else {
      fail("{}: layer_types[{}] is '{}' (linear_attention or full_attention expected)", cfg.source(), l,
           layer_types[size_t(l)]);
    }

    const bool moe = mlp_types.empty() ? (l >= first_dense && l % freq == 0) : mlp_types[size_t(l)] == "sparse";
    const std::string M = P + "block_sparse_moe.";
    if (moe) {
      const int64_t I = cfg.req_int("moe_intermediate_size");
      RouterSpec rs = router;
      rs.selection_bias = W.opt_vec(M + "gate.e_score_correction_bias", E);
      std::vector<ExpertWeights> experts(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) {
        const std::string X = fmt::format("{}experts.{}.", M, e);
        experts[size_t(e)].gate = W.linear(X + "w1", I, D);
        experts[size_t(e)].down = W.linear(X + "w2", D, I);
        experts[size_t(e)].up = W.linear(X + "w3", I, D);
      }
      std::unique_ptr<GatedMlp> shared;
      const int64_t ns = cfg.get_int("num_shared_experts", 0);
      if (ns > 0)
        shared = std::make_unique<GatedMlp>(W.linear(M + "shared_experts.gate_proj", I * ns, D),
                                            W.linear(M + "shared_experts.up_proj", I * ns, D),
                                            W.linear(M + "shared_experts.down_proj", D, I * ns), act);
      L.ffn = std::make_unique<MoeBlock>(W.linear(M + "gate", E, D), nullptr, rs, std::move(experts), act,
                                         std::move(shared), nullptr);
    } else {
      const int64_t I = cfg.req_int("intermediate_size");
      const std::string Q = W.has_linear(M + "gate_proj") ? M : P + "mlp.";
      L.ffn = std::make_unique<GatedMlp>(W.linear(Q + "gate_proj", I, D), W.linear(Q + "up_proj", I, D),
                                         W.linear(Q + "down_proj", D, I), act);
    }
    model->add_layer(std::move(L));
  }
  model->set_embedding(W.matrix("model.embed_tokens.weight", info.vocab, D), W.linear("lm_head", info.vocab, D),
                       W.vec("model.norm.weight", D), eps);
  return model;
}

}  // namespace sluice
