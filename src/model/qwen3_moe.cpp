// Qwen3-MoE (model_type qwen3_moe): GQA with per-head q/k RMSNorm and NeoX
// RoPE, softmax top-k router with optional renormalisation, no shared experts.

#include "format/checkpoint.h"
#include "format/model_layout.h"
#include "model/architectures.h"
#include "model/gqa_attention.h"
#include "model/moe.h"
#include "model/decoder.h"
#include "util/error.h"

namespace sluice {

std::unique_ptr<Decoder> build_qwen3_moe(std::unique_ptr<Checkpoint> ckpt, const Config& cfg, Backend& be) {
  const ModelLayout layout = model_layout(cfg);
  ModelInfo info = basic_model_info(cfg, "qwen3_moe");
  auto model = std::make_unique<Decoder>(info, std::move(ckpt), "", be);
  WeightLoader& W = model->weights();
  const TensorNames& N = *layout.family->tensors;
  using R = TensorRole;
  const int64_t D = info.hidden;
  const float eps = float(cfg.req_double("rms_norm_eps"));

  GqaSpec gs = gqa_spec_from_config(cfg, D, /*kv_heads_required=*/false);
  gs.norm_eps = eps;
  if (cfg.get_bool("use_sliding_window", false))
    fail("{}: use_sliding_window is not supported for qwen3_moe", cfg.source());
  const bool bias = cfg.get_bool("attention_bias", false);

  const int64_t E = cfg.get_int("num_experts", 0);
  RouterSpec router;
  router.scoring = RouterSpec::SoftmaxAll;
  router.n_experts = E;
  router.top_k = cfg.get_int("num_experts_per_tok", 0);
  router.renormalize = cfg.get_bool("norm_topk_prob", false);
  if (E > 0 && (router.top_k < 1 || router.top_k > E))
    fail("{}: num_experts_per_tok {} must be in [1, num_experts={}]", cfg.source(), router.top_k, E);
  if (cfg.get_string("hidden_act", "silu") != "silu")
    fail("{}: hidden_act '{}' is not supported (silu is)", cfg.source(), cfg.get_string("hidden_act", ""));
  GatedActivation act;

  for (int64_t l = 0; l < info.n_layers; ++l) {
    Decoder::Layer L;
    L.attn_norm = W.vec(N(R::AttnNorm, l), D);
    L.ffn_norm = W.vec(N(R::FfnNorm, l), D);
    GqaWeights gw;
    const int64_t qw = gs.n_heads * gs.head_dim, kw = gs.n_kv_heads * gs.head_dim;
    gw.q = W.linear(N(R::AttnQ, l), qw, D);
    gw.k = W.linear(N(R::AttnK, l), kw, D);
    gw.v = W.linear(N(R::AttnV, l), kw, D);
    gw.o = W.linear(N(R::AttnO, l), D, qw);
    if (bias) {
      gw.q_bias = W.vec(N.bias(R::AttnQ, l), qw);
      gw.k_bias = W.vec(N.bias(R::AttnK, l), kw);
      gw.v_bias = W.vec(N.bias(R::AttnV, l), kw);
    }
    gw.q_norm = W.vec(N(R::AttnQNorm, l), gs.head_dim);
    gw.k_norm = W.vec(N(R::AttnKNorm, l), gs.head_dim);
    L.attn = std::make_unique<GqaAttention>(be, gs, gw);

    if (layout.is_moe(l)) {
      const int64_t I = cfg.req_int("moe_intermediate_size");
      std::vector<ExpertWeights> experts(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) {
        experts[size_t(e)].gate = host_matrix(W.linear_view(layout.expert_base(l, e, 0), I, D));
        experts[size_t(e)].up = host_matrix(W.linear_view(layout.expert_base(l, e, 1), I, D));
        experts[size_t(e)].down = host_matrix(W.linear_view(layout.expert_base(l, e, 2), D, I));
      }
      model->experts().set_layer(int32_t(l), std::move(experts));
      L.ffn = std::make_unique<MoeBlock>(be, int32_t(l), model->expert_slot(), W.linear(N(R::MoeRouter, l), E, D),
                                         nullptr, router, act, nullptr, nullptr);
    } else {
      const int64_t I = cfg.req_int("intermediate_size");
      L.ffn = load_gated_mlp(W, N, kDenseMlp, l, I, D, act);
    }
    model->add_layer(std::move(L));
  }
  const bool tied = cfg.get_bool("tie_word_embeddings", false);
  Matrix embed = W.matrix(N(R::TokenEmbedding), info.vocab, D);
  model->set_embedding(embed, tied ? embed : W.linear(N(R::Output), info.vocab, D), W.vec(N(R::OutputNorm), D), eps);
  return model;
}

}  // namespace sluice
