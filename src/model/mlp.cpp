#include "model/mlp.h"

#include <vector>

#include "kernels/matmul.h"

namespace sluice {

void GatedMlp::forward(const float* x, int64_t T, float* out) const {
  const int64_t I = gate_.rows, D = gate_.cols;
  std::vector<float> g(size_t(T * I)), u(size_t(T * I));
  matmul(gate_, x, T, D, g.data(), I);
  matmul(up_, x, T, D, u.data(), I);
  for (size_t i = 0; i < g.size(); ++i) g[i] = act_(g[i], u[i]);
  matmul(down_, g.data(), T, I, out, down_.rows);
}

}  // namespace sluice
