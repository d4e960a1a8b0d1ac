#include "util/splitmix64.h"
#include "store/synthetic_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"

namespace sluice {

namespace {

constexpr double kTwoPi = 6.283185307179586;

uint64_t mix64(uint64_t x) { return splitmix64(x); }
double unit(uint64_t h) { return double(h >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
uint64_t hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
bool name_ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

}  // namespace

RoutingRole routing_role(const std::string& n) {
  if (name_ends_with(n, "embed_tokens.weight")) return RoutingRole::Embedding;
  if (name_ends_with(n, "lm_head.weight")) return RoutingRole::LmHead;
  if (name_ends_with(n, ".gate.weight")) return RoutingRole::Router;
  if (name_ends_with(n, ".gate.e_score_correction_bias")) return RoutingRole::RouterBias;
  // What adds to the residual stream: attention outputs, feed-forward down projections (dense,
  // shared, routed; packed codes too), K3's projection of the routed experts' latent sum.
  if (name_ends_with(n, "routed_expert_down_proj.weight")) return RoutingRole::None;  // K3: into the latent, not the residual
  for (const char* w : {"o_proj.weight", "down_proj.weight", "down_proj.weight_packed", "routed_expert_up_proj.weight"})
    if (name_ends_with(n, w)) return RoutingRole::ResidualWriter;
  return RoutingRole::None;
}

RoutingStructure::RoutingStructure(const RealisticRouting& p, uint64_t seed, int64_t hidden, int64_t experts,
                                   int64_t top_k)
    : p_(p), seed_(seed), hidden_(hidden), experts_(experts), top_k_(top_k) {
  if (!(p.width > 0)) fail("synth: --topic-width must be > 0, got {}", p.width);
  if (!(p.popularity >= 0) || !(p.step >= 0) || !(p.sharpness >= 0) || !(p.router_noise >= 0) || !(p.amplitude > 0) ||
      !(p.lm_sharpness >= 0) || !(p.lm_noise >= 0))
    fail("synth: realistic routing parameters must be >= 0 (amplitude > 0)");
  if (experts < 2 || top_k < 1 || top_k >= experts)
    fail("synth: realistic routing needs top_k ({}) below the expert count ({})", top_k, experts);
  // The bump's standard deviation in radians: half of `width` x top_k expert spacings.
  const double width = std::min(0.5 * p.width * double(top_k) * kTwoPi / double(experts), kTwoPi);
  step_ = p.step * double(top_k) * kTwoPi / double(experts);
  harmonics_ = std::max<int64_t>(1, int64_t(std::ceil(3.0 / width)));
  if (dims() > hidden / 4)
    fail("synth: realistic routing needs {} topic coordinates, more than a quarter of the hidden size {}", dims(),
         hidden);
  double sum = 0;
  for (int64_t k = 1; k <= harmonics_; ++k) {
    kernel_.push_back(std::exp(-0.5 * double(k * k) * width * width));
    sum += kernel_.back();
  }
  for (auto& g : kernel_) g /= sum;
  // RMS of an embedding row: random N(0,1) coordinates, H harmonics of amplitude A and the constant A.
  rms_ = std::sqrt((double(hidden - dims()) + double(harmonics_ + 1) * p.amplitude * p.amplitude) / double(hidden));
}

double RoutingStructure::token_angle(int64_t id) const { return kTwoPi * unit(mix64(seed_ ^ mix64(uint64_t(id) * 2 + 1))); }

namespace {
// The experts 0..n-1 in an order drawn from `h`.
std::vector<int32_t> drawn_order(uint64_t h, int64_t n) {
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::vector<uint64_t> r(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) r[size_t(e)] = mix64(h ^ mix64(uint64_t(e)));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return r[size_t(a)] < r[size_t(b)]; });
  return order;
}
}  // namespace

void RoutingStructure::begin(RoutingRole role, const std::string& name) {
  role_ = role;
  if (role != RoutingRole::Router && role != RoutingRole::RouterBias) return;
  // The layer's key: the name up to "gate." (shared by the router's rows and its bias).
  const std::string key = name.substr(0, name.rfind("gate.") + 5);
  const uint64_t h = mix64(seed_ ^ hash(key));
  const double offset = kTwoPi * unit(mix64(h));
  expert_angle_.assign(size_t(experts_), 0.0);
  popularity_.assign(size_t(experts_), 0.0);
  const std::vector<int32_t> place = drawn_order(h, experts_), rank = drawn_order(mix64(h + 1), experts_);
  // The same logit spread concentrates picks more where a pick is among more experts (measured with
  // 8 picks, popularity 5: hottest 30% take 81% of 96 experts' picks, 98% of 384's), so the spread
  // is `popularity` at 48 experts per pick and scales as (experts per pick / 48)^-0.3.
  const double spread = p_.popularity * std::pow(double(experts_) / (48.0 * double(top_k_)), -0.3);
  for (int64_t i = 0; i < experts_; ++i) {
    expert_angle_[size_t(place[size_t(i)])] = offset + kTwoPi * (double(i) + 0.5) / double(experts_);
    // Popularity: a logistic quantile of the rank, scaled to a standard deviation of about 1.
    const double u = (double(i) + 0.5) / double(experts_);
    popularity_[size_t(rank[size_t(i)])] = spread * std::log((1 - u) / u) / 1.7;
  }
}

double RoutingStructure::value(int64_t row, int64_t col) const {
  if (col == 2 * harmonics_) {  // the constant coordinate (the zero harmonic)
    switch (role_) {
      case RoutingRole::Embedding: return p_.amplitude;
      // popularity minus the sharpness: a token's own-angle expert of average popularity scores 0 (sigmoid 0.5)
      case RoutingRole::Router: return (popularity_[size_t(row)] - p_.sharpness) * rms_ / p_.amplitude;
      default: return 0.0;
    }
  }
  const int64_t k = col / 2 + 1;
  const bool sine = col % 2;
  auto trig = [&](double a) { return sine ? std::sin(double(k) * a) : std::cos(double(k) * a); };
  const double g = kernel_[size_t(k - 1)];
  switch (role_) {
    case RoutingRole::Embedding:
      return p_.amplitude * trig(token_angle(row));
    case RoutingRole::LmHead:  // sum_k g_k cos(k (angle - step - topic)) * span, on the normalised state
      return p_.lm_sharpness * g * trig(token_angle(row) - step_) * rms_ / p_.amplitude;
    case RoutingRole::Router:
      return p_.sharpness * g * trig(expert_angle_[size_t(row)]) * rms_ / p_.amplitude;
    default:
      return 0.0;
  }
}

double RoutingStructure::rest_scale() const {
  switch (role_) {
    case RoutingRole::LmHead: return p_.lm_noise;
    case RoutingRole::Router: return p_.router_noise;
    default: return 1.0;
  }
}

}  // namespace sluice
