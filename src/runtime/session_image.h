// A session's decoding state copied to host memory: the tokens fed and every
// layer's state after them (KV / latent caches, recurrent state, convolution
// history). Session::image() takes one, Session::restore() puts one back bit
// for bit; runtime/state_file.h stores one on disk.
#pragma once
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace sluice {

struct SessionImage {
  std::vector<int32_t> tokens;                   // one per position
  std::vector<std::vector<SavedTensor>> layers;  // [layer] -> its tensors

  int64_t positions() const { return int64_t(tokens.size()); }
  // Whether every tensor is per position (caches only), so that any prefix
  // of the positions can be restored; recurrent state only at all of them.
  bool can_cut() const {
    for (const auto& l : layers)
      for (const auto& t : l)
        if (!t.per_position) return false;
    return true;
  }
  // The longest prefix of `n` positions or fewer this image can restore (0: none).
  int64_t usable_prefix(int64_t n) const {
    if (n >= positions()) return positions();
    return can_cut() ? n : 0;
  }
  int64_t bytes() const {
    int64_t b = int64_t(tokens.size() * sizeof(int32_t));
    for (const auto& l : layers)
      for (const auto& t : l) b += int64_t(t.values.size() * sizeof(float));
    return b;
  }
};

}  // namespace sluice
