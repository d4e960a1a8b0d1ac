// Gated MLP: down(act(gate x, up x)). Used for dense layers and shared experts.
#pragma once
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

}  // namespace sluice
