#include "model/mlp.h"

#include "model/weights.h"

namespace sluice {

void GatedMlp::forward(Tensor x, Tensor out) const {
  const int64_t T = x.rows(), I = gate_.rows();
  Buffer g(be_, T, I), u(be_, T, I);
  be_.matmul(gate_, x, g);
  be_.matmul(up_, x, u);
  be_.gated(act_, g, u, g);
  be_.matmul(down_, g, out);
}

std::unique_ptr<GatedMlp> load_gated_mlp(const WeightLoader& W, const TensorNames& N, MlpRoles roles, int64_t l,
                                         int64_t I, int64_t D, GatedActivation act) {
  return std::make_unique<GatedMlp>(W.backend(), W.linear(N(roles.gate, l), I, D), W.linear(N(roles.up, l), I, D),
                                    W.linear(N(roles.down, l), D, I), act);
}

}  // namespace sluice
