// DeepSeek-V3 / Kimi K2 (model_type deepseek_v3, kimi_k2): MLA with YaRN and
// interleaved RoPE, sigmoid group-limited router with selection bias, shared
// experts, dense first layers. Weights may be bf16, FP8 block-scaled or INT4
// pack-quantized; WeightLoader picks the format per tensor.
#include <cmath>

#include "format/checkpoint.h"
#include "format/model_layout.h"
#include "model/architectures.h"
#include "model/mla_attention.h"
#include "model/moe.h"
#include "model/decoder.h"
#include "util/error.h"

namespace sluice {

namespace {

// Absorbed MLA with interleaved RoPE; YaRN's mscale enters the softmax scale squared.
MlaSpec deepseek_mla_spec(const Config& cfg) {
  MlaSpec mla;
  mla.n_heads = cfg.req_int("num_attention_heads");
  mla.q_lora = cfg.get_int("q_lora_rank", 0);
  mla.kv_lora = cfg.req_int("kv_lora_rank");
  mla.nope = cfg.req_int("qk_nope_head_dim");
  mla.rope_dim = cfg.req_int("qk_rope_head_dim");
  mla.v_dim = cfg.req_int("v_head_dim");
  mla.rope = rope_from_config(cfg, mla.rope_dim, /*interleaved=*/true);
  mla.scale = float(1.0 / std::sqrt(double(mla.nope + mla.rope_dim)));
  const double m = mla_yarn_mscale(cfg, mla.rope);
  if (m != 1.0) mla.scale = float(double(mla.scale) * m * m);
  return mla;
}

// The sigmoid, group-limited router with its score-correction bias (E routed experts; none when 0).
RouterSpec deepseek_router_spec(const Config& cfg, int64_t E) {
  RouterSpec router;
  if (E > 0) {
    const std::string scoring = cfg.get_string("scoring_func", "sigmoid");
    if (scoring != "sigmoid") fail("{}: scoring_func '{}' is not supported (sigmoid is)", cfg.source(), scoring);
    const std::string method = cfg.get_string("topk_method", "noaux_tc");
    if (method != "noaux_tc") fail("{}: topk_method '{}' is not supported (noaux_tc is)", cfg.source(), method);
    router.scoring = RouterSpec::SigmoidBiased;
    router.n_experts = E;
    router.top_k = cfg.req_int("num_experts_per_tok");
    router.n_group = cfg.get_int("n_group", 1);
    router.topk_group = cfg.get_int("topk_group", 1);
    router.renormalize = cfg.get_bool("norm_topk_prob", true);
    router.scaling = float(cfg.get_double("routed_scaling_factor", 1.0));
    if (router.n_group < 1 || E % router.n_group || router.topk_group < 1 || router.topk_group > router.n_group ||
        router.top_k < 1 || router.top_k > E)
      fail("{}: inconsistent routing: n_routed_experts {}, n_group {}, topk_group {}, num_experts_per_tok {}",
           cfg.source(), E, router.n_group, router.topk_group, router.top_k);
  }
  return router;
}

}  // namespace

std::unique_ptr<Decoder> build_deepseek_v3(std::unique_ptr<Checkpoint> ckpt, const Config& cfg, Backend& be) {
  const ModelLayout layout = model_layout(cfg);
  ModelInfo info = basic_model_info(cfg, cfg.req_string("model_type"));
  auto model = std::make_unique<Decoder>(info, std::move(ckpt), "", be);
  WeightLoader& W = model->weights();
  const TensorNames& N = *layout.family->tensors;
  using R = TensorRole;
  const int64_t D = info.hidden;
  const float eps = float(cfg.req_double("rms_norm_eps"));

  MlaSpec mla = deepseek_mla_spec(cfg);
  const int64_t E = cfg.get_int("n_routed_experts", 0);
  const RouterSpec router = deepseek_router_spec(cfg, E);
  GatedActivation act;
  if (cfg.get_string("hidden_act", "silu") != "silu")
    fail("{}: hidden_act '{}' is not supported (silu is)", cfg.source(), cfg.get_string("hidden_act", ""));

  for (int64_t l = 0; l < info.n_layers; ++l) {
    Decoder::Layer L;
    L.attn_norm = W.vec(N(R::AttnNorm, l), D);
    L.ffn_norm = W.vec(N(R::FfnNorm, l), D);
    MlaWeights mw = load_mla_weights(W, N, l, mla, D, /*output_gate=*/false);
    L.attn = std::make_unique<MlaAttention>(be, mla, mw);

    if (layout.is_moe(l)) {
      const int64_t I = cfg.req_int("moe_intermediate_size");
      RouterSpec rs = router;
      rs.selection_bias = W.opt_host_vec(N(R::MoeScoreBias, l), E);
      std::vector<ExpertWeights> experts(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) {
        experts[size_t(e)].gate = host_matrix(W.linear_view(layout.expert_base(l, e, 0), I, D));
        experts[size_t(e)].up = host_matrix(W.linear_view(layout.expert_base(l, e, 1), I, D));
        experts[size_t(e)].down = host_matrix(W.linear_view(layout.expert_base(l, e, 2), D, I));
      }
      std::unique_ptr<GatedMlp> shared;
      const int64_t ns = cfg.get_int("n_shared_experts", 0);
      if (ns > 0)
        shared = load_gated_mlp(W, N, kSharedExperts, l, I * ns, D, act);
      model->experts().set_layer(int32_t(l), std::move(experts));
      L.ffn = std::make_unique<MoeBlock>(be, int32_t(l), model->expert_slot(), W.linear(N(R::MoeRouter, l), E, D),
                                         nullptr, rs, act, std::move(shared), nullptr);
    } else {
      const int64_t I = cfg.req_int("intermediate_size");
      L.ffn = load_gated_mlp(W, N, kDenseMlp, l, I, D, act);
    }
    model->add_layer(std::move(L));
  }
  model->set_embedding(W.matrix(N(R::TokenEmbedding), info.vocab, D), W.linear(N(R::Output), info.vocab, D),
                       W.vec(N(R::OutputNorm), D), eps);
  return model;
}

}  // namespace sluice
