// Gated activations: h = act(gate, up) elementwise.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/ops.h"

namespace sluice {

struct GatedActivation {
  enum Kind { SwiGLU, SiTU, ClampedSwiGLU } kind = SwiGLU;
  float beta = 4.0f, linear_beta = 25.0f;  // SiTU: beta*tanh(g/beta)*sigmoid(g) * linear_beta*tanh(u/linear_beta)
  float alpha = 1.702f, limit = 7.0f;      // gpt-oss: (clamp(u)+1) * g*sigmoid(alpha*g), g = min(g, limit)

  float operator()(float g, float u) const {
    switch (kind) {
      case SwiGLU: return ops::silu(g) * u;
      case SiTU: return beta * std::tanh(g / beta) * ops::sigmoid(g) * (linear_beta * std::tanh(u / linear_beta));
      case ClampedSwiGLU: {
        g = std::min(g, limit);
        u = std::max(-limit, std::min(u, limit));
        return (u + 1.0f) * g * ops::sigmoid(alpha * g);
      }
    }
    return 0.0f;
  }
};

}  // namespace sluice
