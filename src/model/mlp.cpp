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

std::unique_ptr<GatedMlp> load_gated_mlp(const WeightLoader& W, const std::string& p, int64_t I, int64_t D,
                                         GatedActivation act) {
  return std::make_unique<GatedMlp>(W.backend(), W.linear(p + "gate_proj", I, D), W.linear(p + "up_proj", I, D),
                                    W.linear(p + "down_proj", D, I), act);
}

}  // namespace sluice
