// DSpark: Kimi K3's own block drafter (Inferact/Kimi-K3-DSpark), a small
// MLA decoder that reads K3's hidden states and proposes a block of tokens
// in one pass.
//
// What the published layout is, and where it was learned (no weights were
// at hand; every fact below comes from reading other projects' code):
//  - Tensor roster and shapes: Deltafin's strict admission of the pinned
//    checkpoint (github.com/gavamedia/deltafin, native/deltafin/src/
//    dspark_checkpoint.rs): one model.safetensors of 68 BF16 tensors, no
//    prefix: context_proj.weight [D, n_target*Dt], context_norm.weight [D],
//    layers.{0..4}.{input_layernorm, post_attention_layernorm}.weight [D],
//    layers.{i}.self_attn.{q_a_proj [q_lora, D], q_a_layernorm [q_lora],
//    q_b_proj [H*(nope+rope), q_lora], kv_a_proj_with_mqa [kv_lora+rope, D],
//    kv_a_layernorm [kv_lora], kv_b_proj [H*(nope+v), kv_lora],
//    o_proj [D, H*v]}, layers.{i}.mlp.{gate,up,down}_proj, final_norm.weight
//    [D], markov_head.markov_w1.weight [V, rank], markov_head.markov_w2.weight
//    [V, rank], confidence_head.proj.weight [1, D+rank] and .bias [1], and
//    embed_tokens.weight [V, D] (present but borrowed from K3; not read here).
//    Its config.json (model_type "k3_dspark"): target_layer_ids, mask_token_id,
//    markov_rank, mla_use_nope=false, mla_use_output_gate=false,
//    rope_parameters {rope_type yarn, factor, original_max_position_embeddings,
//    rope_theta, beta_fast, beta_slow, mscale, mscale_all_dim}.
//  - The forward: vLLM's K3 DSpark model (vllm model_executor/models,
//    K3DSparkForCausalLM / K3DSparkModel, DFlash-style): the captured target
//    rows [T, n_target*Dt] become context states
//    c = RMSNorm(context_proj(rows); context_norm); every draft layer turns c
//    into its own attention cache through kv_a_proj_with_mqa only (the
//    normalised latent and the RoPE'd shared key at the context position:
//    "precompute_and_store_context_kv"), without the layer's input norm. The
//    query block is [the token just chosen, mask_token_id x k] at positions
//    [P, P+k] (P = positions the target has fed), embedded with K3's table;
//    pre-norm layers (MLA attention with rotary pe dims, no output gate, then
//    a SiLU-gated MLP) attend non-causally to the whole context and the whole
//    block ("non_causal_multi_token_decode"); final_norm; K3's lm_head.
//    Deltafin's provider_dspark.cpp agrees on the MLA/YaRN details
//    (interleaved pairs; softmax scale (nope+rope)^-0.5 * mscale(factor,
//    mscale_all_dim)^2; RMSNorm eps rms_norm_eps everywhere).
//  - The Markov head: vLLM's DSpark Markov benchmark (sample_block): the
//    block's rows 1..k give base logits; step i adds
//    markov_w2 . markov_w1[prev] (prev: the anchor, then each drafted token)
//    and takes the argmax.
//  - The confidence head: proj(cat[hidden, markov_embed]) + bias, one logit
//    per drafted token (DeepSeek-V4 DSpark notes found beside the above).
//    vLLM loads but does not use it. Which hidden it reads is not stated
//    anywhere we could see: we take the row's final-normed hidden state (the
//    one the head reads), and stop a draft at the first token whose
//    sigmoid(confidence) is below DSparkOptions::min_confidence (0: never).
//  - Which rows are "after layer i": Deltafin says K3's layer outputs (the
//    Block AttnRes partial sums) after 0-based layers [2,23,47,71,89]; we
//    read target_layer_ids as 0-based decoder layers whose outputs are
//    captured (Session::capture_hidden).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "compute/rope.h"
#include "compute/tensor.h"
#include "format/checkpoint.h"
#include "format/config.h"
#include "model/hidden_draft_model.h"
#include "model/model.h"

namespace sluice {

class WeightLoader;

struct DSparkConfig {
  int64_t hidden = 0, intermediate = 0, layers = 0, heads = 0;
  int64_t q_lora = 0, kv_lora = 0, nope = 0, rope_dim = 0, v_dim = 0;
  int64_t vocab = 0, target_hidden = 0, markov_rank = 0;
  int32_t mask_token = 0;
  std::vector<int64_t> target_layers;
  float eps = 1e-5f;
  float attn_scale = 0.0f;  // softmax scale, YaRN mscale^2 included
  bool confidence_head = true;
  Rope rope;

  // Reads a DSpark config.json; errors name the file and the field.
  static DSparkConfig parse(const Config& c);
  // Whether a config.json describes a DSpark drafter.
  static bool is_dspark(const Config& c);
  // Refuses a target whose hidden size, vocabulary or layer count the drafter was not made for.
  void check_target(const ModelInfo& target) const;
};

struct DSparkOptions {
  // Stop a draft at the first token whose confidence (a sigmoid) is below this (0: never).
  float min_confidence = 0.0f;
  // The longest block it drafts: DSpark was trained on blocks of 7 mask tokens
  // after the anchor (Deltafin's maximum_drafts; vLLM's default).
  int64_t max_block = 7;
};

class DSparkModel : public HiddenDraftModel {
 public:
  // Loads config.json and model.safetensors from `dir`, checking every
  // tensor's shape (errors name the file and the tensor). `embed` and `head`
  // are the target's token embedding and output head (DSpark borrows them);
  // `be` must be the backend they live on.
  DSparkModel(const std::string& dir, Backend& be, Matrix embed, Matrix head, DSparkOptions opts = {});
  ~DSparkModel() override;
  const DSparkConfig& config() const { return cfg_; }

  std::unique_ptr<State> new_state() const override;
  const std::vector<int64_t>& target_layers() const override { return cfg_.target_layers; }
  void cut(State& s, int64_t n) const override;
  void extend(State& s, const float* rows, int64_t n, const std::vector<int32_t>& history) const override;
  std::vector<int32_t> draft(State& s, const std::vector<int32_t>& history, int64_t k) const override;

  struct Draft {
    std::vector<int32_t> tokens;
    std::vector<float> confidence;  // sigmoid of the confidence head per token (1 without the head)
  };
  // Up to k tokens to follow `anchor`, the token at s.positions() (chosen by
  // the target and not yet fed to it), with their confidences.
  Draft draft_block(State& s, int32_t anchor, int64_t k) const;

 private:
  struct Layer {
    Vector input_norm, post_norm, q_a_norm, kv_a_norm;
    Matrix q_a, q_b, kv_a, kv_b, o, gate, up, down;
  };
  // The normalised latent and rotated shared key of x's rows at positions pos0.. into `rows`.
  void latent_rows(const Layer& L, Tensor x, int64_t pos0, Tensor rows) const;
  DSparkConfig cfg_;
  DSparkOptions opts_;
  Backend& be_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<WeightLoader> weights_;
  Matrix embed_, head_;
  Matrix context_proj_, markov_w1_, markov_w2_;
  Vector context_norm_, final_norm_;
  std::vector<float> confidence_w_;  // [D + rank], host
  float confidence_b_ = 0.0f;
  std::vector<Layer> layers_;
};

}  // namespace sluice
