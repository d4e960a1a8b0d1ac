// Mixture-of-experts feed-forward block: router, routed experts (optionally in
// a latent width, as Kimi K3), shared experts. For a batch of T tokens each
// selected expert is evaluated once over all the tokens that picked it.
#pragma once
#include <memory>
#include <vector>

#include "kernels/qmatrix.h"
#include "model/activation.h"
#include "model/blocks.h"
#include "model/mlp.h"
#include "model/router.h"

namespace sluice {

struct ExpertWeights {
  // Separate gate/up, or one matrix with interleaved rows (2j = gate_j, 2j+1 = up_j, gpt-oss).
  QMatrix gate, up, down;
  bool gate_up_interleaved = false;
  const float* gate_up_bias = nullptr;  // interleaved like the rows (gpt-oss)
  const float* down_bias = nullptr;
};

struct LatentProjection {  // Kimi K3 latent MoE: experts run on down(x), result normalised then up-projected
  QMatrix down, up;
  const float* norm = nullptr;  // RMSNorm weight over the latent width, or null
  float eps = 1e-5f;
};

class MoeBlock : public FfnBlock {
 public:
  MoeBlock(QMatrix router, const float* router_bias, RouterSpec spec, std::vector<ExpertWeights> experts,
           GatedActivation act, std::unique_ptr<GatedMlp> shared, std::unique_ptr<LatentProjection> latent)
      : router_(router), router_bias_(router_bias), spec_(spec), experts_(std::move(experts)), act_(act),
        shared_(std::move(shared)), latent_(std::move(latent)) {}
  void forward(const float* x, int64_t T, float* out) const override;

 private:
  void run_expert(const ExpertWeights& ew, const float* X, int64_t n, int64_t width, float* Y) const;
  QMatrix router_;
  const float* router_bias_;
  RouterSpec spec_;
  std::vector<ExpertWeights> experts_;
  GatedActivation act_;
  std::unique_ptr<GatedMlp> shared_;
  std::unique_ptr<LatentProjection> latent_;
};

}  // namespace sluice
