#include "model/mlp.h"

#include <vector>

#include "kernels/matmul.h"
#include "model/weights.h"

namespace sluice {

void GatedMlp::forward(const float* x, int64_t T, float* out) const {
  const int64_t I = gate_.rows, D = gate_.cols;
  std::vector<float> g(size_t(T * I)), u(size_t(T * I));
  matmul(gate_, x, T, D, g.data(), I);
  matmul(up_, x, T, D, u.data(), I);
  for (size_t i = 0; i < g.size(); ++i) g[i] = act_(g[i], u[i]);
  matmul(down_, g.data(), T, I, out, down_.rows);
}

std::unique_ptr<GatedMlp> load_gated_mlp(const WeightLoader& W, const std::string& p, int64_t I, int64_t D,
                                         GatedActivation act) {
  return std::make_unique<GatedMlp>(W.linear(p + "gate_proj", I, D), W.linear(p + "up_proj", I, D),
                                    W.linear(p + "down_proj", D, I), act);
}

}  // namespace sluice
