// EAGLE-3(.1) with MLA attention: a one-layer chain drafter that reads three
// of the target's hidden states per position (K3's is
// lightseekorg/kimi-k3-eagle3.1-mla).
//
// The layout, and where it was learned (no weights were at hand):
//  - Tensor roster: Deltafin's pinned admission of the K3 drafter
//    (github.com/gavamedia/deltafin, native/deltafin/src/eagle3_provider.rs,
//    native/provider_gate/provider_eagle3.h): one model.safetensors,
//    fc.weight [H, 3*Ht], fc_norm.{0,1,2}.weight [Ht] (one RMSNorm per tapped
//    layer before fc; the 3.1 revision), layers.0.{hidden_norm,
//    input_layernorm, post_attention_layernorm}.weight [H],
//    layers.0.self_attn.{q_a_proj [q_lora, 2H], q_a_layernorm, q_b_proj,
//    kv_a_proj_with_mqa [kv_lora+rope, 2H], kv_a_layernorm, kv_b_proj,
//    o_proj}, layers.0.mlp.{gate,up,down}_proj, norm.weight [H],
//    lm_head.weight [draft_vocab, H] (its own head), and embed_tokens.weight
//    (the target's, borrowed here). A reduced draft vocabulary comes with
//    d2t [draft_vocab] (I64: target id = draft id + d2t[draft id]), as
//    SGLang's loader reads it; fc_norm and d2t are read when present.
//  - The forward: SGLang's Eagle3DeepseekV2ForCausalLM (its model file for
//    the kimi-k2.5-eagle3-mla checkpoints, Eagle3MLADecoderLayer): the
//    fused hidden g = fc(cat of the taps); the layer's attention input is
//    cat[input_layernorm(embed(token)), hidden_norm(g)] (2H wide, read by
//    q_a_proj and kv_a_proj_with_mqa), residual g; then
//    post_attention_layernorm, a SiLU-gated MLP, the residual again; norm;
//    lm_head. Causal attention over the drafter's own cache.
//  - Pairing and chaining (Deltafin's Eagle3Model, provider_eagle3.h): the
//    row of position t pairs with the token at t+1 and sits in the cache at
//    position t; the newest row waits for its successor (the token the
//    target just chose), and that pair gives draft 1; each further draft
//    feeds back the previous step's post-norm hidden state with the
//    embedding of the previous draft. (SGLang feeds back the pre-norm sum
//    unless norm_output is set; we follow Deltafin, which is K3's 3.1.)
//  - Which layers: config eagle_config.eagle_aux_hidden_state_layer_ids
//    (or the same key at the top level), vLLM's convention that aux id i is
//    the input of layer i, i.e. the output of layer i-1 (Deltafin: K3's ids
//    2/46/90 are captured after layers 1/45/89). Without the key, vLLM's
//    default (2, L/2, L-3).
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

struct Eagle3Config {
  int64_t hidden = 0, intermediate = 0, heads = 0;
  int64_t q_lora = 0, kv_lora = 0, nope = 0, rope_dim = 0, v_dim = 0;
  int64_t vocab = 0, draft_vocab = 0, target_hidden = 0;
  std::vector<int64_t> aux_ids;        // as the config gives them (inputs of these target layers)
  std::vector<int64_t> target_layers;  // the layers whose outputs are captured: aux_ids - 1
  float eps = 1e-5f;
  float attn_scale = 0.0f;
  Rope rope;

  // Reads an EAGLE-3 MLA config.json for a target of `target_layers` layers
  // (the default taps depend on it); errors name the file and the field.
  static Eagle3Config parse(const Config& c, int64_t target_layers);
  // Whether a config.json describes an EAGLE-3 drafter (architectures Eagle3*).
  static bool is_eagle3(const Config& c);
  void check_target(const ModelInfo& target) const;
};

class Eagle3Model : public HiddenDraftModel {
 public:
  // Loads config.json and model.safetensors from `dir` for `target`
  // (shapes checked; errors name the file and the tensor); `embed` is the
  // target's token embedding on backend `be`.
  Eagle3Model(const std::string& dir, const ModelInfo& target, Backend& be, Matrix embed);
  ~Eagle3Model() override;
  const Eagle3Config& config() const { return cfg_; }

  std::unique_ptr<State> new_state() const override;
  const std::vector<int64_t>& target_layers() const override { return cfg_.target_layers; }
  void cut(State& s, int64_t n) const override;
  void extend(State& s, const float* rows, int64_t n, const std::vector<int32_t>& history) const override;
  std::vector<int32_t> draft(State& s, const std::vector<int32_t>& history, int64_t k) const override;

 private:
  // x: [T, 2H] attention inputs at positions pos0..: their cache rows.
  void latent_rows(Tensor x, int64_t pos0, Tensor rows) const;
  // cat[input_layernorm(embed(tokens)), hidden_norm(g)] into x [T, 2H].
  void attention_input(const int32_t* tokens, Tensor g, Tensor x) const;
  Eagle3Config cfg_;
  Backend& be_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<WeightLoader> weights_;
  Matrix embed_, fc_, q_a_, q_b_, kv_a_, kv_b_, o_, gate_, up_, down_, head_;
  std::vector<Vector> fc_norms_;  // empty: the taps go into fc as they are
  Vector hidden_norm_, input_norm_, post_norm_, q_a_norm_, kv_a_norm_, norm_;
  std::vector<int64_t> d2t_;      // empty: draft ids are target ids
};

}  // namespace sluice
