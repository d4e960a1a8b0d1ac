// Gated MLP: down(act(gate x, up x)). Used for dense layers and shared experts.
#pragma once
#include <memory>
#include <string>

#include "kernels/qmatrix.h"
#include "model/activation.h"
#include "model/blocks.h"

namespace sluice {

class GatedMlp : public FfnBlock {
 public:
  GatedMlp(QMatrix gate, QMatrix up, QMatrix down, GatedActivation act)
      : gate_(gate), up_(up), down_(down), act_(act) {}
  void forward(const float* x, int64_t T, float* out) const override;
  int64_t hidden() const { return down_.rows; }

 private:
  QMatrix gate_, up_, down_;
  GatedActivation act_;
};

class WeightLoader;
// `prefix`gate_proj / up_proj / down_proj of width `inter` on a `hidden`-wide stream.
std::unique_ptr<GatedMlp> load_gated_mlp(const WeightLoader& W, const std::string& prefix, int64_t inter,
                                         int64_t hidden, GatedActivation act);

}  // namespace sluice
