// Gated activations h = act(gate, up), elementwise: which one and its
// parameters (the backend evaluates them).
#pragma once

namespace sluice {

struct GatedActivation {
  enum Kind { SwiGLU, SiTU, ClampedSwiGLU } kind = SwiGLU;
  float beta = 4.0f, linear_beta = 25.0f;  // SiTU: beta*tanh(g/beta)*sigmoid(g) * linear_beta*tanh(u/linear_beta)
  float alpha = 1.702f, limit = 7.0f;      // gpt-oss: (clamp(u)+1) * g*sigmoid(alpha*g), g = min(g, limit)
};

}  // namespace sluice
