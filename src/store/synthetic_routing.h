// Router weights that route like released models do (`sluice synth --routing
// realistic`), for benchmarks whose cache behaviour should be the real one.
//
// Random router rows send tokens to experts independently of each other; real
// models' routing has popular experts (K3: the hottest 30% take ~86% of
// routes) and topics that last (K3: ~31% of a token's experts repeat from the
// previous token). Both come here from the weights, so the engine computes
// routing exactly as for any checkpoint:
// - a topic: each token id has an angle on a circle; its embedding carries
//   (cos k*angle, sin k*angle), k = 1..H, on the first 2H coordinates, then
//   the constant `amplitude` (the rest stays random);
// - each expert of each MoE layer has an angle too (evenly spaced, in an order
//   drawn per layer), and its router row holds a bump around that angle in the
//   same coordinates (Fourier coefficients of a Gaussian whose two standard
//   deviations span `width` x top_k expert spacings), plus the usual random
//   part: a token's nearest experts score `sharpness` logits above the others,
//   give or take `router_noise`;
// - popularity, apart from the topic: the topic coordinates end with a
//   constant one (the zero harmonic: `amplitude` in every embedding row), and
//   each expert's router row holds there its popularity less `sharpness`, so
//   a router logit is sharpness x bump + popularity - sharpness (+ noise): a
//   token's own-angle expert of average popularity sits near logit 0, where
//   the sigmoid scores still differ, and popularity scales with the topic's
//   strength at any width (the score-correction bias stays 0; an earlier
//   version put popularity there, after the sigmoid, and the same bias gave a
//   hottest-30% share of 64% at 96 experts and 87% at 384). Popularity is
//   `popularity` x a logistic quantile (spread like a standard normal) of a
//   rank drawn per layer apart from the angles, scaled by (experts per pick /
//   48)^-0.3: the same logit spread concentrates picks more where each pick
//   is among more experts (spread 5: hottest 30% 81% at 96 experts top-8, 98%
//   at 384). A popular expert wins over a wider arc of topics, so the hottest
//   30% take a share set mostly by `popularity`, while how many experts a token
//   keeps from the previous one is set by `step` against `width` (and rises
//   with `popularity`);
// - lasting topics: lm_head's rows score a token by its angle minus `step`
//   top_k-expert spacings, so a greedy continuation walks the circle forward a
//   step at a time (always forward: a walk both ways settled into two-token
//   loops, every step routed alike); text made of random ids has no topic;
// - a clean topic: the matrices that add to the residual stream (attention
//   outputs, feed-forward down projections) leave the topic coordinates alone
//   (zero rows there), so every layer's router sees the current token's topic.
//   Random attention at real widths otherwise writes a context average of a
//   few units there that changes little from token to token: at Kimi K2's
//   widths tokens then kept ~80% of the previous token's experts and every
//   pick was a popular one (released models: ~31%, ~86%).
// Calibrated for the sigmoid routers of DeepSeek-V3, Kimi K2 and Kimi K3 (their
// score-correction bias is written as 0); Qwen3-MoE's softmax router is not, and is refused.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

struct RealisticRouting {
  double width = 1.2;         // the topic bump's two standard deviations, in top_k-expert spacings
  double popularity = 3.3;    // spread of the experts' popularity in router logits, ~std over a layer of 48 experts per pick
  double step = 1.45;         // topic move per generated token, in top_k-expert spacings (always forward)
  double sharpness = 10.0;    // router logit of a token's own-angle expert over a far one
  double router_noise = 0.6;  // std of the router logit's token-specific (random) part
  double amplitude = 4.0;     // each topic coordinate of an embedding (the others are ~N(0, 1))
  double lm_sharpness = 24.0, lm_noise = 0.0;  // lm_head: topic logit span, std of the random rest (0: the walk cannot loop)
};

enum class RoutingRole { None, Embedding, LmHead, Router, RouterBias, ResidualWriter };

// What a tensor of the checkpoint is to the routing structure, by its name.
RoutingRole routing_role(const std::string& tensor_name);

class RoutingStructure {
 public:
  // hidden: model width; experts, top_k: per MoE layer. Errors name the parameter.
  RoutingStructure(const RealisticRouting& p, uint64_t seed, int64_t hidden, int64_t experts, int64_t top_k);
  // Coordinates [0, dims) carry the topic: H harmonics (cos, sin), then the constant (zero harmonic).
  int64_t dims() const { return 2 * harmonics_ + 1; }
  // Sets up a tensor (`name` keys the layer's expert angles and popularity).
  void begin(RoutingRole role, const std::string& name);
  // The structured value at (row, col), col < dims(), of the tensor begun.
  double value(int64_t row, int64_t col) const;
  // std of the random part of each row, relative to the default initialisation.
  double rest_scale() const;
  // The router logit an expert of the layer begun gets for popularity (its row's constant coordinate
  // against the embedding's, plus -sharpness); its score-correction bias is 0.
  double popularity(int64_t expert) const { return popularity_[size_t(expert)]; }
  double bias(int64_t) const { return 0.0; }
  const RealisticRouting& params() const { return p_; }

 private:
  double token_angle(int64_t id) const;
  RealisticRouting p_;
  uint64_t seed_;
  int64_t hidden_, experts_, top_k_, harmonics_;
  double step_;                 // topic move per generated token, in radians
  std::vector<double> kernel_;  // Fourier coefficients g_1..g_H of the bump, summing to 1
  double rms_;                  // expected RMS of an embedding row
  RoutingRole role_ = RoutingRole::None;
  std::vector<double> expert_angle_;
  std::vector<double> popularity_;
};

}  // namespace sluice
