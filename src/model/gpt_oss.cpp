// gpt-oss (model_type gpt_oss): GQA with biases, attention sinks, alternating
// sliding-window / full layers, NeoX RoPE with YaRN, top-k router with softmax
// over the picked logits, clamped SwiGLU experts with biases stored as MXFP4.

#include "format/checkpoint.h"
#include "format/model_layout.h"
#include "model/architectures.h"
#include "model/gqa_attention.h"
#include "model/moe.h"
#include "model/decoder.h"
#include "util/error.h"

namespace sluice {

std::unique_ptr<Decoder> build_gpt_oss(std::unique_ptr<Checkpoint> ckpt, const Config& cfg, Backend& be) {
  const ModelLayout layout = model_layout(cfg);
  ModelInfo info = basic_model_info(cfg, "gpt_oss");
  auto model = std::make_unique<Decoder>(info, std::move(ckpt), "", be);
  WeightLoader& W = model->weights();
  const TensorNames& N = *layout.family->tensors;
  using R = TensorRole;
  const int64_t D = info.hidden;
  const float eps = float(cfg.req_double("rms_norm_eps"));

  GqaSpec gs = gqa_spec_from_config(cfg, D, /*kv_heads_required=*/true);
  auto layer_types = cfg.get_strings("layer_types");
  if (!layer_types.empty() && int64_t(layer_types.size()) != info.n_layers)
    fail("{}: layer_types has {} entries for {} layers", cfg.source(), layer_types.size(), info.n_layers);
  const int64_t window = cfg.get_int("sliding_window", 0);

  const int64_t E = cfg.req_int("num_local_experts");
  const int64_t I = cfg.req_int("intermediate_size");
  RouterSpec router;
  router.scoring = RouterSpec::TopkSoftmax;
  router.n_experts = E;
  router.top_k = cfg.has("num_experts_per_tok") ? cfg.req_int("num_experts_per_tok") : cfg.req_int("experts_per_token");
  if (router.top_k < 1 || router.top_k > E)
    fail("{}: num_experts_per_tok {} must be in [1, {}]", cfg.source(), router.top_k, E);
  GatedActivation act;
  act.kind = GatedActivation::ClampedSwiGLU;
  act.limit = float(cfg.get_double("swiglu_limit", 7.0));
  act.alpha = 1.702f;
  if (D % 32 || I % 32) fail("{}: hidden_size and intermediate_size must be multiples of 32 for MXFP4 experts", cfg.source());

  for (int64_t l = 0; l < info.n_layers; ++l) {
    Decoder::Layer L;
    L.attn_norm = W.vec(N(R::AttnNorm, l), D);
    L.ffn_norm = W.vec(N(R::FfnNorm, l), D);
    GqaSpec ls = gs;
    const std::string type = layer_types.empty() ? (l % 2 == 0 ? "sliding_attention" : "full_attention")
                                                 : layer_types[size_t(l)];
    if (type == "sliding_attention") ls.window = window;
    else if (type != "full_attention")
      fail("{}: layer_types[{}] is '{}' (sliding_attention or full_attention expected)", cfg.source(), l, type);
    GqaWeights gw;
    const int64_t qw = gs.n_heads * gs.head_dim, kw = gs.n_kv_heads * gs.head_dim;
    gw.q = W.linear(N(R::AttnQ, l), qw, D);
    gw.k = W.linear(N(R::AttnK, l), kw, D);
    gw.v = W.linear(N(R::AttnV, l), kw, D);
    gw.o = W.linear(N(R::AttnO, l), D, qw);
    gw.q_bias = W.opt_vec(N.bias(R::AttnQ, l), qw);
    gw.k_bias = W.opt_vec(N.bias(R::AttnK, l), kw);
    gw.v_bias = W.opt_vec(N.bias(R::AttnV, l), kw);
    gw.o_bias = W.opt_vec(N.bias(R::AttnO, l), D);
    gw.sinks = W.vec(N(R::AttnSinks, l), gs.n_heads);
    L.attn = std::make_unique<GqaAttention>(be, ls, gw);

    const Vector gu_bias = W.vec(N(R::ExpertGateUpBias, l), E * 2 * I);
    const Vector down_bias = W.vec(N(R::ExpertDownBias, l), E * D);
    std::vector<ExpertWeights> experts(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      ExpertWeights& ew = experts[size_t(e)];
      ew.gate_up_interleaved = true;
      ew.gate = host_matrix(W.mxfp4_stack_slice(layout.stacked_blocks(l, 0), layout.stacked_scales(l, 0), e, 2 * I, D));
      ew.down = host_matrix(W.mxfp4_stack_slice(layout.stacked_blocks(l, 1), layout.stacked_scales(l, 1), e, D, I));
      ew.gate_up_bias = gu_bias.slice(e * 2 * I, 2 * I);
      ew.down_bias = down_bias.slice(e * D, D);
    }
    model->experts().set_layer(int32_t(l), std::move(experts));
    L.ffn = std::make_unique<MoeBlock>(be, int32_t(l), model->expert_slot(), W.linear(N(R::MoeRouter, l), E, D),
                                       W.host_vec(N.bias(R::MoeRouter, l), E), router, act, nullptr, nullptr);
    model->add_layer(std::move(L));
  }
  model->set_embedding(W.matrix(N(R::TokenEmbedding), info.vocab, D), W.linear(N(R::Output), info.vocab, D),
                       W.vec(N(R::OutputNorm), D), eps);
  return model;
}

}  // namespace sluice
