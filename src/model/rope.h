// Rotary position embedding: default frequencies or YaRN, rotating either
// consecutive pairs (DeepSeek/Kimi checkpoints) or the two halves (NeoX style).
#pragma once
#include <cstdint>
#include <vector>

#include "format/config.h"

namespace sluice {

struct Rope {
  int64_t dim = 0;            // number of rotated dimensions
  bool interleaved = false;   // true: pairs (2i, 2i+1); false: (i, i + dim/2)
  std::vector<double> inv_freq;  // dim/2 frequencies
  double attention_factor = 1.0;  // multiplies cos and sin (YaRN)
  double yarn_factor = 1.0;       // rope_scaling.factor (1 when not YaRN)
  bool yarn = false;

  // Rotates x[0..dim) in place for position pos.
  void apply(float* x, int64_t pos) const;
};

// Reads rope_theta and rope_scaling / rope_parameters from `c`.
Rope rope_from_config(const Config& c, int64_t dim, bool interleaved);

// YaRN magnitude correction: 0.1 * mscale * ln(scale) + 1 (1 when scale <= 1).
double yarn_get_mscale(double scale, double mscale);

}  // namespace sluice
