// Rotary position embedding parameters: default frequencies or YaRN, rotating
// either consecutive pairs (DeepSeek/Kimi checkpoints) or the two halves (NeoX
// style). model/rope.h reads them from a config.
#pragma once
#include <cstdint>
#include <vector>

namespace sluice {

struct Rope {
  int64_t dim = 0;            // number of rotated dimensions
  bool interleaved = false;   // true: pairs (2i, 2i+1); false: (i, i + dim/2)
  std::vector<double> inv_freq;  // dim/2 frequencies
  double attention_factor = 1.0;  // multiplies cos and sin (YaRN)
  double yarn_factor = 1.0;       // rope_scaling.factor (1 when not YaRN)
  bool yarn = false;

  // Rotates x[0..dim) in place for position pos (the definition; backends follow it).
  void apply(float* x, int64_t pos) const;
};

}  // namespace sluice
