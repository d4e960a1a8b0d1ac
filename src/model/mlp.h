// Gated MLP: down(act(gate x, up x)). Used for dense layers and shared experts.
#pragma once
#include <memory>
#include <string>

#include "compute/backend.h"
#include "format/tensor_names.h"
#include "model/blocks.h"

namespace sluice {

class GatedMlp : public FfnBlock {
 public:
  GatedMlp(Backend& be, Matrix gate, Matrix up, Matrix down, GatedActivation act)
      : be_(be), gate_(gate), up_(up), down_(down), act_(act) {}
  void forward(Tensor x, Tensor out) const override;
  int64_t activation_floats_per_token(int64_t) const override { return 2 * gate_.rows(); }  // gate and up
  int64_t hidden() const { return down_.rows(); }

 private:
  Backend& be_;
  Matrix gate_, up_, down_;
  GatedActivation act_;
};

class WeightLoader;
// The linears `roles` of layer `layer` (named by the family's table), of width `inter` on a
// `hidden`-wide stream.
std::unique_ptr<GatedMlp> load_gated_mlp(const WeightLoader& W, const TensorNames& names, MlpRoles roles,
                                         int64_t layer, int64_t inter, int64_t hidden, GatedActivation act);

}  // namespace sluice
