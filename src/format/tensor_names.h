// The tensor names of each model family, in one table (llama.cpp's
// LLM_TENSOR_NAMES is the idea): every tensor of the spine by its role, the way
// the family's release spells it. The decoder builders (model/) load by these
// names and the synthetic-checkpoint recipes (store/) write them, so a family's
// names are written once; the family table (format/model_families.def) names
// each family's table in its `tensors` column, and ModelFamily::tensors points
// at it. Routed experts are named by ModelFamily::experts (format/model_family.h).
//
// A name is a pattern: "{}" stands for the decoder layer. A linear layer's
// pattern is its base name (the loader adds ".weight", or the suffixes of a
// quantized format: model/weights.h; weight() and bias() add theirs); every
// other tensor's pattern is its whole name. The text model's prefix
// ("language_model." for Kimi K3) is not part of the names.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace sluice {

enum class TensorRole : uint8_t {
  // Embedding, output head (linear) and final norm.
  TokenEmbedding, Output, OutputNorm,
  // Per layer: the norms before attention and before the FFN.
  AttnNorm, FfnNorm,
  // Attention projections (linears): GQA's q/k/v/o; MLA's q (without a low-rank query), o and
  // low-rank parts; the output gate (K3's MLA and KDA, full rank).
  AttnQ, AttnK, AttnV, AttnO, AttnQA, AttnQB, AttnKvA, AttnKvB, AttnGate,
  // Attention vectors: GQA's per-head q/k norms and sinks; MLA's low-rank norms.
  AttnQNorm, AttnKNorm, AttnSinks, AttnQANorm, AttnKvANorm,
  // Kimi Delta Attention: convolutions, decay gate (linears f_a, f_b), beta (linear b), low-rank
  // output gate (linears g_a, g_b), per-head output norm, dt bias and A_log.
  KdaQConv, KdaKConv, KdaVConv, KdaFA, KdaFB, KdaB, KdaGA, KdaGB, KdaONorm, KdaDtBias, KdaALog,
  // A dense layer's gated MLP (linears), and the same under the MoE block's name (some Kimi releases).
  FfnGate, FfnUp, FfnDown, FfnGateInMoe, FfnUpInMoe, FfnDownInMoe,
  // MoE: the router (linear; bias() is gpt-oss's router bias), the score-correction bias,
  // the shared experts (linears), the latent projection (linears) and its norm (K3), the
  // routed experts' stacked biases (gpt-oss).
  MoeRouter, MoeScoreBias, SharedGate, SharedUp, SharedDown, LatentDown, LatentUp, LatentNorm,
  ExpertGateUpBias, ExpertDownBias,
  // Block AttnRes (K3): per layer the mixing norm and projection before attention and before the
  // FFN, and before the final norm.
  AttnResNorm, AttnResProj, FfnResNorm, FfnResProj, OutAttnResNorm, OutAttnResProj,
  kCount
};
inline constexpr size_t kTensorRoles = size_t(TensorRole::kCount);

// "AttnQ", ... (for errors).
std::string_view tensor_role_name(TensorRole role);

// One family's names.
class TensorNames {
 public:
  using Entry = std::pair<TensorRole, std::string_view>;
  constexpr TensorNames(std::string_view family, std::initializer_list<Entry> entries) : family_(family) {
    for (const Entry& e : entries) pattern_[size_t(e.first)] = e.second;
  }
  // A copy with more (or other) names: families that spell most tensors alike.
  constexpr TensorNames with(std::string_view family, std::initializer_list<Entry> entries) const {
    TensorNames t = *this;
    t.family_ = family;
    for (const Entry& e : entries) t.pattern_[size_t(e.first)] = e.second;
    return t;
  }

  bool has(TensorRole role) const { return !pattern_[size_t(role)].empty(); }
  // The name of `role` (of decoder layer `layer` for a per-layer tensor); fails naming the role
  // and the family when the family has no such tensor.
  std::string operator()(TensorRole role, int64_t layer = -1) const;
  // A linear's stored weight (bf16/f32/f16: "<base>.weight") and its bias ("<base>.bias").
  std::string weight(TensorRole role, int64_t layer = -1) const { return (*this)(role, layer) + ".weight"; }
  std::string bias(TensorRole role, int64_t layer = -1) const { return (*this)(role, layer) + ".bias"; }
  std::string_view family() const { return family_; }

 private:
  std::string_view family_;
  std::string_view pattern_[kTensorRoles] = {};
};

// The three linears of a gated MLP.
struct MlpRoles {
  TensorRole gate, up, down;
};
inline constexpr MlpRoles kDenseMlp{TensorRole::FfnGate, TensorRole::FfnUp, TensorRole::FfnDown};
inline constexpr MlpRoles kDenseMlpInMoe{TensorRole::FfnGateInMoe, TensorRole::FfnUpInMoe, TensorRole::FfnDownInMoe};
inline constexpr MlpRoles kSharedExperts{TensorRole::SharedGate, TensorRole::SharedUp, TensorRole::SharedDown};

}  // namespace sluice
