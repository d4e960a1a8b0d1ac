#include "model/blocks.h"

#include <algorithm>

namespace sluice {

void FfnBlock::forward_span(Tensor x, Tensor out, int64_t batch_rows) const {
  const int64_t T = x.rows(), step = batch_rows > 0 ? batch_rows : T;
  for (int64_t r = 0; r < T; r += step) {
    const int64_t n = std::min(step, T - r);
    forward(x.row_range(r, n), out.row_range(r, n));
  }
}

}  // namespace sluice
