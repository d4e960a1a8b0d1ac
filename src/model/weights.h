// Turns checkpoint tensors into kernel-ready weights, with shape checks whose
// errors name the tensor. Recognises every released weight layout:
//   <base>.weight                 BF16 / F16 / F32
//   <base>.weight + .weight_scale_inv   F8_E4M3 with 128x128 block scales
//   <base>.weight_packed (I32) + .weight_scale (BF16) [+ .weight_shape]   INT4 pack-quantized
//   <base>.weight_packed (U8)  + .weight_scale (U8)                        MXFP4 compressed-tensors
#pragma once
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "format/checkpoint.h"
#include "kernels/qmatrix.h"

namespace sluice {

// Spine weights come back as handles placed by the backend (linear, matrix,
// vec); routed experts as host views (*_view), which their source places.
class WeightLoader {
 public:
  // `prefix` is prepended to every name (e.g. "language_model." for Kimi K3).
  WeightLoader(const Checkpoint& ckpt, Backend& backend, std::string prefix = "")
      : ckpt_(ckpt), be_(backend), prefix_(std::move(prefix)) {}

  Backend& backend() const { return be_; }

  const Checkpoint& checkpoint() const { return ckpt_; }
  bool has(const std::string& name) const { return ckpt_.has(prefix_ + name); }
  bool has_linear(const std::string& base) const;
  TensorView tensor(const std::string& name) const;
  // Total bytes of the distinct tensors looked up so far (what the model uses).
  uint64_t accessed_bytes() const;
  // Checkpoint names (prefix included) of every tensor looked up so far.
  std::vector<std::string> accessed_names() const;

  // A linear layer's weight; rows/cols < 0 skip that check.
  Matrix linear(const std::string& base, int64_t rows, int64_t cols) const { return be_.matrix(linear_view(base, rows, cols)); }
  QMatrix linear_view(const std::string& base, int64_t rows, int64_t cols) const;
  // A 2-D tensor viewed as a matrix (e.g. embeddings), same formats as linear().
  Matrix matrix(const std::string& name, int64_t rows, int64_t cols) const { return be_.matrix(matrix_view(name, rows, cols)); }
  QMatrix matrix_view(const std::string& name, int64_t rows, int64_t cols) const;
  // Any float tensor converted to f32; `numel` < 0 skips the size check.
  Vector vec(const std::string& name, int64_t numel) const;
  // Same, but empty when the tensor is absent.
  Vector opt_vec(const std::string& name, int64_t numel) const;
  // The f32 values on the host (for values read at load, and host-side routing); valid for the loader's lifetime.
  const float* host_vec(const std::string& name, int64_t numel) const;
  const float* opt_host_vec(const std::string& name, int64_t numel) const {
    return has(name) ? host_vec(name, numel) : nullptr;
  }

  // MXFP4 expert stacks in the gpt-oss layout: blocks [E, rows, cols/32, 16], scales [E, rows, cols/32].
  QMatrix mxfp4_stack_slice(const std::string& blocks, const std::string& scales, int64_t expert, int64_t rows,
                            int64_t cols) const;

 private:
  [[noreturn]] void shape_error(const TensorView& t, const std::string& want) const;
  const Checkpoint& ckpt_;
  Backend& be_;
  std::string prefix_;
  mutable std::deque<std::vector<float>> owned_;  // stable addresses
  mutable std::map<std::string, uint64_t> accessed_;
};

}  // namespace sluice
