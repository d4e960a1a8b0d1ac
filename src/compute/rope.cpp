#include "compute/rope.h"

#include <cmath>

namespace sluice {

void Rope::apply(float* x, int64_t pos) const {
  const int64_t half = dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double a = double(pos) * inv_freq[size_t(i)];
    const float c = float(std::cos(a) * attention_factor), s = float(std::sin(a) * attention_factor);
    const int64_t i0 = interleaved ? 2 * i : i;
    const int64_t i1 = interleaved ? 2 * i + 1 : i + half;
    const float x0 = x[i0], x1 = x[i1];
    x[i0] = x0 * c - x1 * s;
    x[i1] = x1 * c + x0 * s;
  }
}

}  // namespace sluice
