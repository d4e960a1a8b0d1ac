// Mixture-of-experts feed-forward block: router, routed experts (optionally in
// a latent width, as Kimi K3), shared experts. For a batch of T tokens each
// selected expert is fetched and evaluated once over all the tokens that
// picked it. Reads are requested as soon as routing is known; the shared
// expert and already-resident experts are computed while the rest arrive.
// Expert outputs are summed in a fixed order, so results do not depend on
// which experts happened to be cached.
#pragma once
#include <memory>
#include <vector>

#include "compute/expert_source.h"
#include "kernels/qmatrix.h"
#include "model/activation.h"
#include "model/blocks.h"
#include "model/mlp.h"
#include "model/router.h"

namespace sluice {

struct LatentProjection {  // Kimi K3 latent MoE: experts run on down(x), result normalised then up-projected
  QMatrix down, up;
  const float* norm = nullptr;  // RMSNorm weight over the latent width, or null
  float eps = 1e-5f;
};

class MoeBlock : public FfnBlock {
 public:
  MoeBlock(int32_t layer, std::shared_ptr<ExpertSourceSlot> experts, QMatrix router, const float* router_bias,
           RouterSpec spec, GatedActivation act, std::unique_ptr<GatedMlp> shared,
           std::unique_ptr<LatentProjection> latent)
      : layer_(layer), experts_(std::move(experts)), router_(router), router_bias_(router_bias), spec_(spec), act_(act),
        shared_(std::move(shared)), latent_(std::move(latent)) {}
  void forward(const float* x, int64_t T, float* out) const override;
  void prefetch_hint(const float* x, int64_t T) const override;

  // Routing only: top-k ids and weights for each of T tokens ([T, top_k] each).
  void route_tokens(const float* x, int64_t T, std::vector<int32_t>& ids, std::vector<float>& weights) const;

 private:
  void run_expert(const ExpertWeights& ew, const float* X, int64_t n, int64_t width, float* Y) const;
  int32_t layer_;
  std::shared_ptr<ExpertSourceSlot> experts_;
  QMatrix router_;
  const float* router_bias_;
  RouterSpec spec_;
  GatedActivation act_;
  std::unique_ptr<GatedMlp> shared_;
  std::unique_ptr<LatentProjection> latent_;
};

}  // namespace sluice
