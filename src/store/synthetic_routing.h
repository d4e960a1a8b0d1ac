// Router weights that route like released models do (`sluice synth --routing
// realistic`), for benchmarks whose cache behaviour should be the real one.
//
// Random router rows send tokens to experts independently of each other; real
// models' routing has popular experts (K3: the hottest 30% take ~86% of
// routes) and topics that last (K3: ~31% of a token's experts repeat from the
// previous token). Both come here from the weights, so the engine computes
// routing exactly as for any checkpoint:
// - a topic: each token id has an angle on a circle; its embedding carries
//   (cos k*angle, sin k*angle), k = 1..H, on the first 2H coordinates (the
//   rest stays random);
// - each expert of each MoE layer has an angle too (the hot ones evenly spaced,
//   then the others), and its router row holds a bump around that angle in the
//   same coordinates (Fourier coefficients of a Gaussian as wide as top_k hot
//   experts), plus the usual random part: a token's nearest experts score
//   `sharpness` logits above the others, give or take `router_noise`;
// - popularity: e_score_correction_bias is `hot_bias` for the hot experts
//   (`hot_fraction` of each layer), 0 for the others;
// - lasting topics: lm_head's rows score a token by its angle minus its step
//   (+-`step` hot-expert spacings, by token), so a greedy continuation walks
//   the circle a step at a time; text made of random ids has no topic;
// - a clean topic: the matrices that add to the residual stream (attention
//   outputs, feed-forward down projections) leave the topic coordinates alone
//   (zero rows there), so every layer's router sees the current token's topic.
//   Random attention at real widths otherwise writes a context average of a
//   few units there that changes little from token to token: at Kimi K2's
//   widths tokens then kept ~80% of the previous token's experts and every
//   pick was a popular one (released models: ~31%, ~86%).
// The architecture needs a router score-correction bias (DeepSeek-V3, Kimi K2,
// Kimi K3); Qwen3-MoE has none and is refused.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

struct RealisticRouting {
  double hot_fraction = 0.3;  // share of each layer's experts that get the popularity bias
  double hot_bias = 0.25;     // that bias, added to the sigmoid score a hot expert is chosen by
  double step = 5.0;          // topic move per generated token, in hot-expert spacings
  double sharpness = 6.0;     // router logit of a token's own-angle expert over a far one
  double router_noise = 1.0;  // std of the router logit's token-specific (random) part
  double amplitude = 4.0;     // each topic coordinate of an embedding (the others are ~N(0, 1))
  double lm_sharpness = 24.0, lm_noise = 0.25;  // lm_head: topic logit span, std of the random rest
};

enum class RoutingRole { None, Embedding, LmHead, Router, RouterBias, ResidualWriter };

// What a tensor of the checkpoint is to the routing structure, by its name.
RoutingRole routing_role(const std::string& tensor_name);

class RoutingStructure {
 public:
  // hidden: model width; experts, top_k: per MoE layer. Errors name the parameter.
  RoutingStructure(const RealisticRouting& p, uint64_t seed, int64_t hidden, int64_t experts, int64_t top_k);
  int64_t dims() const { return 2 * harmonics_; }  // coordinates [0, dims) carry the topic
  // Sets up a tensor (`name` keys the layer's expert angles and hot set).
  void begin(RoutingRole role, const std::string& name);
  // The structured value at (row, col), col < dims(), of the tensor begun.
  double value(int64_t row, int64_t col) const;
  // std of the random part of each row, relative to the default initialisation.
  double rest_scale() const;
  double bias(int64_t expert) const { return hot_[size_t(expert)] ? p_.hot_bias : 0.0; }
  const RealisticRouting& params() const { return p_; }

 private:
  double token_angle(int64_t id) const;
  double token_step(int64_t id) const;
  RealisticRouting p_;
  uint64_t seed_;
  int64_t hidden_, experts_, top_k_, hot_count_, harmonics_;
  std::vector<double> kernel_;  // Fourier coefficients g_1..g_H of the bump, summing to 1
  double rms_;                  // expected RMS of an embedding row
  RoutingRole role_ = RoutingRole::None;
  std::vector<double> expert_angle_;
  std::vector<bool> hot_;
};

}  // namespace sluice
