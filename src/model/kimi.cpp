// Kimi Linear (model_type kimi_linear) and Kimi K3 (model_type kimi_k3, the
// same text model family nested under text_config with a language_model.
// prefix). Both mix KDA layers with NoPE MLA layers and use a sigmoid-routed
// MoE with shared experts. K3 adds: the lower-bound KDA gate and full-rank
// output gate, the MLA sigmoid output gate, latent MoE with an RMSNorm of the
// expert sum, SiTU-GLU activations, MXFP4 experts and Block AttnRes instead of
// the residual stream. Everything is read from the config; nothing is K3-sized.
#include <cmath>
#include <set>

#include "format/checkpoint.h"
#include "format/model_layout.h"
#include "model/architectures.h"
#include "model/decoder.h"
#include "model/kda_attention.h"
#include "model/mla_attention.h"
#include "model/moe.h"
#include "util/error.h"

namespace sluice {

namespace {

Vector a_log_per_head(const WeightLoader& W, const std::string& name, int64_t heads) {
  TensorView t = W.tensor(name);
  const float* v = W.host_vec(name, -1);
  if (t.numel() < heads) fail("{}: '{}' has {} values for {} heads", *t.file, t.name(), t.numel(), heads);
  for (int64_t i = heads; i < t.numel(); ++i)
    if (v[i] != 0.0f) fail("{}: '{}' padding beyond the first {} (per-head) values must be zero", *t.file, t.name(), heads);
  return W.backend().vector(v, heads);
}

// true per layer for MLA ("full attention"), false for KDA.
std::vector<bool> attention_schedule(const Config& cfg, int64_t n_layers) {
  std::vector<bool> mla(static_cast<size_t>(n_layers), false);
  auto types = cfg.get_strings("layer_types");
  if (!types.empty()) {
    if (int64_t(types.size()) != n_layers)
      fail("{}: layer_types has {} entries for {} layers", cfg.source(), types.size(), n_layers);
    for (int64_t l = 0; l < n_layers; ++l) {
      if (types[size_t(l)] == "full_attention") mla[size_t(l)] = true;
      else if (types[size_t(l)] != "linear_attention")
        fail("{}: layer_types[{}] is '{}' (linear_attention or full_attention expected)", cfg.source(), l, types[size_t(l)]);
    }
    return mla;
  }
  Config lac = cfg.sub("linear_attn_config");
  std::set<int64_t> seen;
  auto mark = [&](const char* field, bool is_mla) {
    for (int64_t id : lac.get_ints(field)) {  // one-based layer ids
      if (id < 1 || id > n_layers) fail("{}: {} contains {}, outside 1..{}", lac.source(), field, id, n_layers);
      if (!seen.insert(id).second) fail("{}: layer {} is listed twice in kda_layers/full_attn_layers", lac.source(), id);
      mla[size_t(id - 1)] = is_mla;
    }
  };
  mark("kda_layers", false);
  mark("full_attn_layers", true);
  if (int64_t(seen.size()) != n_layers)
    fail("{}: kda_layers and full_attn_layers cover {} of the {} layers", lac.source(), seen.size(), n_layers);
  return mla;
}

GatedActivation activation(const Config& cfg) {
  GatedActivation act;
  const std::string a = cfg.get_string("hidden_act", "silu");
  if (a == "silu") return act;
  if (a != "situ") fail("{}: hidden_act '{}' is not supported (silu, situ are)", cfg.source(), a);
  act.kind = GatedActivation::SiTU;
  act.beta = float(cfg.get_double("activation_situ_beta", 4.0));
  act.linear_beta = float(cfg.get_double("activation_situ_linear_beta", 25.0));
  return act;
}

// Everything build_kimi needs from the config, read (and checked) before any tensor.
struct KimiSpec {
  KimiSpec(ModelLayout l, Config text) : layout(std::move(l)), cfg(std::move(text)) {}
  ModelLayout layout;
  ModelInfo info;
  Config cfg;  // the text config
  float eps = 1e-6f;
  std::vector<bool> is_mla;  // per layer: MLA, else KDA
  GatedActivation act;
  KdaSpec kda;
  bool full_rank_gate = false;  // K3: one g_proj instead of g_a/g_b
  MlaSpec mla;
  bool mla_gate = false;  // K3: sigmoid output gate on MLA
  RouterSpec router;
  int64_t moe_inter = 0, dense_inter = 0;  // widths of routed experts and of dense MLPs (0: no such layer)
  int64_t latent = 0;                      // latent MoE width (0: experts run at the hidden width)
  bool latent_norm = false;
  int64_t shared_experts = 0;
  int64_t attn_res_block = 0;  // Block AttnRes: layers per block (0: plain residual stream)
};

KimiSpec kimi_spec(const Config& top) {
  const bool nested = top.has("text_config");
  KimiSpec s(model_layout(top), nested ? top.sub("text_config") : top);
  const Config& cfg = s.cfg;
  s.info = basic_model_info(cfg, top.req_string("model_type"));
  if (nested && top.has("eos_token_id")) s.info.eos_ids = top.get_token_ids("eos_token_id");  // replace the text model's
  s.eps = float(cfg.req_double("rms_norm_eps"));
  s.is_mla = attention_schedule(cfg, s.info.n_layers);
  s.act = activation(cfg);

  KdaSpec& ks = s.kda;
  if (auto lac = cfg.opt_sub("linear_attn_config")) {
    ks.n_heads = lac->req_int("num_heads");
    ks.head_dim = lac->req_int("head_dim");
    ks.conv_kernel = lac->get_int("short_conv_kernel_size", 4);
    s.full_rank_gate = lac->get_bool("use_full_rank_gate", false);
    if (lac->has("gate_lower_bound")) {
      ks.gate = KdaSpec::LowerBound;
      ks.lower_bound = float(lac->req_double("gate_lower_bound"));
    }
  } else {
    ks.n_heads = cfg.req_int("linear_num_heads");
    ks.head_dim = cfg.req_int("linear_head_dim");
    ks.conv_kernel = cfg.get_int("linear_conv_kernel_dim", 4);
  }
  ks.norm_eps = s.eps;

  MlaSpec& ms = s.mla;
  ms.n_heads = cfg.req_int("num_attention_heads");
  ms.q_lora = cfg.get_int("q_lora_rank", 0);
  ms.kv_lora = cfg.req_int("kv_lora_rank");
  ms.nope = cfg.req_int("qk_nope_head_dim");
  ms.rope_dim = cfg.req_int("qk_rope_head_dim");
  ms.v_dim = cfg.req_int("v_head_dim");
  if (!cfg.get_bool("mla_use_nope", true)) fail("{}: mla_use_nope false (rotary MLA) is not supported", cfg.source());
  ms.use_rope = false;  // the "rope" dimensions are used unrotated
  ms.scale = float(1.0 / std::sqrt(double(ms.nope + ms.rope_dim)));
  s.mla_gate = cfg.get_bool("mla_use_output_gate", false);

  if (cfg.get_string("moe_router_activation_func", "sigmoid") != "sigmoid")
    fail("{}: moe_router_activation_func '{}' is not supported (sigmoid is)", cfg.source(),
         cfg.get_string("moe_router_activation_func", ""));
  s.latent = cfg.get_int("routed_expert_hidden_size", 0);
  s.latent_norm = cfg.get_bool("latent_moe_use_norm", false);
  const int64_t E = cfg.req_int("num_experts");
  RouterSpec& router = s.router;
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
  s.attn_res_block = cfg.get_int("attn_res_block_size", 0);
  if (s.attn_res_block < 0) fail("{}: attn_res_block_size must be positive", cfg.source());
  // The FFN widths are required only when a layer of that kind exists.
  for (int64_t l = 0; l < s.info.n_layers; ++l) {
    if (s.layout.is_moe(l) && s.moe_inter == 0) s.moe_inter = cfg.req_int("moe_intermediate_size");
    if (!s.layout.is_moe(l) && s.dense_inter == 0) s.dense_inter = cfg.req_int("intermediate_size");
  }
  s.shared_experts = cfg.get_int("num_shared_experts", 0);
  return s;
}

using R = TensorRole;

std::unique_ptr<AttentionBlock> load_kda(Backend& be, const WeightLoader& W, int64_t l, const KimiSpec& s) {
  const TensorNames& N = *s.layout.family->tensors;
  const KdaSpec& ks = s.kda;
  const int64_t D = s.info.hidden, C = ks.n_heads * ks.head_dim;
  KdaWeights kw;
  kw.q = W.linear(N(R::AttnQ, l), C, D);
  kw.k = W.linear(N(R::AttnK, l), C, D);
  kw.v = W.linear(N(R::AttnV, l), C, D);
  kw.q_conv = W.vec(N(R::KdaQConv, l), C * ks.conv_kernel);
  kw.k_conv = W.vec(N(R::KdaKConv, l), C * ks.conv_kernel);
  kw.v_conv = W.vec(N(R::KdaVConv, l), C * ks.conv_kernel);
  kw.f_a = W.linear(N(R::KdaFA, l), -1, D);
  kw.f_b = W.linear(N(R::KdaFB, l), C, kw.f_a.rows());
  kw.b = W.linear(N(R::KdaB, l), ks.n_heads, D);
  if (s.full_rank_gate) {
    kw.g = W.linear(N(R::AttnGate, l), C, D);
  } else {
    kw.g_a = W.linear(N(R::KdaGA, l), -1, D);
    kw.g_b = W.linear(N(R::KdaGB, l), C, kw.g_a.rows());
  }
  kw.o = W.linear(N(R::AttnO, l), D, C);
  kw.o_norm = W.vec(N(R::KdaONorm, l), ks.head_dim);
  kw.dt_bias = W.vec(N(R::KdaDtBias, l), C);
  kw.a_log = a_log_per_head(W, N(R::KdaALog, l), ks.n_heads);
  return std::make_unique<KdaAttention>(be, ks, std::move(kw));
}

// Routed experts (into the decoder's table), router, latent projection and shared experts of layer l.
std::unique_ptr<FfnBlock> load_moe(Backend& be, Decoder& model, int64_t l, const KimiSpec& s) {
  const TensorNames& N = *s.layout.family->tensors;
  const WeightLoader& W = model.weights();
  const int64_t D = s.info.hidden, E = s.router.n_experts, I = s.moe_inter;
  RouterSpec rs = s.router;
  rs.selection_bias = W.opt_host_vec(N(R::MoeScoreBias, l), E);
  const int64_t XW = s.latent > 0 ? s.latent : D;  // the width experts run at
  std::vector<ExpertWeights> experts(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    experts[size_t(e)].gate = host_matrix(W.linear_view(s.layout.expert_base(l, e, 0), I, XW));
    experts[size_t(e)].down = host_matrix(W.linear_view(s.layout.expert_base(l, e, 2), XW, I));
    experts[size_t(e)].up = host_matrix(W.linear_view(s.layout.expert_base(l, e, 1), I, XW));
  }
  std::unique_ptr<LatentProjection> lp;
  if (s.latent > 0) {
    lp = std::make_unique<LatentProjection>();
    lp->down = W.linear(N(R::LatentDown, l), s.latent, D);
    lp->up = W.linear(N(R::LatentUp, l), D, s.latent);
    if (s.latent_norm) lp->norm = W.vec(N(R::LatentNorm, l), s.latent);
    lp->eps = s.eps;
  }
  std::unique_ptr<GatedMlp> shared;
  if (s.shared_experts > 0) shared = load_gated_mlp(W, N, kSharedExperts, l, I * s.shared_experts, D, s.act);
  model.experts().set_layer(int32_t(l), std::move(experts));
  return std::make_unique<MoeBlock>(be, int32_t(l), model.expert_slot(), W.linear(N(R::MoeRouter, l), E, D), nullptr,
                                    rs, s.act, std::move(shared), std::move(lp));
}

}  // namespace

std::unique_ptr<Decoder> build_kimi(std::unique_ptr<Checkpoint> ckpt, const Config& top, Backend& be) {
  const KimiSpec s = kimi_spec(top);
  auto model = std::make_unique<Decoder>(s.info, std::move(ckpt), s.layout.prefix, be);
  WeightLoader& W = model->weights();
  const TensorNames& N = *s.layout.family->tensors;
  const int64_t D = s.info.hidden;
  for (int64_t l = 0; l < s.info.n_layers; ++l) {
    Decoder::Layer L;
    L.attn_norm = W.vec(N(R::AttnNorm, l), D);
    L.ffn_norm = W.vec(N(R::FfnNorm, l), D);
    if (s.is_mla[size_t(l)]) L.attn = std::make_unique<MlaAttention>(be, s.mla, load_mla_weights(W, N, l, s.mla, D, s.mla_gate));
    else L.attn = load_kda(be, W, l, s);
    if (s.layout.is_moe(l)) {
      L.ffn = load_moe(be, *model, l, s);
    } else {  // a dense layer's MLP, under the MoE block's name in some releases
      const MlpRoles mlp = W.has_linear(N(R::FfnGateInMoe, l)) ? kDenseMlpInMoe : kDenseMlp;
      L.ffn = load_gated_mlp(W, N, mlp, l, s.dense_inter, D, s.act);
    }
    if (s.attn_res_block > 0) {
      L.attn_res_norm = W.vec(N(R::AttnResNorm, l), D);
      L.attn_res_proj = W.vec(N(R::AttnResProj, l), D);
      L.ffn_res_norm = W.vec(N(R::FfnResNorm, l), D);
      L.ffn_res_proj = W.vec(N(R::FfnResProj, l), D);
    }
    model->add_layer(std::move(L));
  }
  if (s.attn_res_block > 0) {
    Decoder::AttnRes ar;
    ar.block_size = s.attn_res_block;
    ar.eps = s.eps;
    ar.out_norm = W.vec(N(R::OutAttnResNorm), D);
    ar.out_proj = W.vec(N(R::OutAttnResProj), D);
    model->set_attn_res(ar);
  }
  model->set_embedding(W.matrix(N(R::TokenEmbedding), s.info.vocab, D), W.linear(N(R::Output), s.info.vocab, D),
                       W.vec(N(R::OutputNorm), D), s.eps);
  return model;
}

}  // namespace sluice
