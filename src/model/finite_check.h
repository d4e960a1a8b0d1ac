// A NaN or Inf in a hidden state spreads to every later layer and to the logits,
// which then sample as garbage (NUL bytes on the terminal) with no error. Each
// pass checks the hidden state after every layer and the logits, and names the
// first place that is not finite. The backend scans the hidden state where it
// is (Backend::first_nonfinite); only a failing state is read back for the
// message. A GPU records the first failure without waiting and is asked once
// per pass (Backend::watch_nonfinite): a wait per layer per pass cost a K3
// decode ~0.1 ms each. (Reading T x D floats back once per layer took ~18% of a 2,000-token
// prefill of the real-size K3 slice on an H100: the GPU waited for the host.)
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "util/error.h"

namespace sluice {

// x: T rows of `width` values for positions pos0, pos0 + 1, ...: the hidden state
// after decoder layer `layer` (zero-based), or the logits when layer < 0.
[[noreturn]] inline void fail_not_finite(float v, int64_t pos, int64_t element, int64_t layer) {
  const std::string what = layer < 0 ? "the logits" : fmt::format("the hidden state after layer {}", layer);
  fail("{} is not finite ({} at position {}, element {}): the checkpoint's weights or config.json (e.g. "
       "rms_norm_eps) give NaN/Inf; `sluice verify --model DIR` checks the weights against their manifest",
       what, v, pos, element);
}

inline void check_finite(const float* x, int64_t T, int64_t width, int64_t pos0, int64_t layer) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < width; ++i)
      if (!std::isfinite(x[t * width + i])) fail_not_finite(x[t * width + i], pos0 + t, i, layer);
}

}  // namespace sluice
