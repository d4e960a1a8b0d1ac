// Weights as model blocks hold them: handles the backend gave out at load.
// A Matrix keeps the stored-format view of the host bytes (the mapped
// checkpoint, or an expert cache slot) and, where the backend keeps its own
// copy (a GPU's memory), that copy; a Vector is an f32 vector (norms, biases)
// the same way. Blocks pass handles to the backend and never read the values.
#pragma once
#include <cstdint>

#include "kernels/qmatrix.h"

namespace sluice {

struct Matrix {
  QMatrix q;                     // stored format, host bytes
  const void* device = nullptr;  // the backend's own copy (null: the host bytes are used)
  int64_t rows() const { return q.rows; }
  int64_t cols() const { return q.cols; }
  bool empty() const { return q.rows == 0; }
};

struct Vector {
  const float* host = nullptr;   // lives as long as the weights (WeightLoader owns converted vectors)
  const void* device = nullptr;  // the backend's own copy (null: host is used)
  int64_t n = 0;
  bool empty() const { return host == nullptr && device == nullptr; }
  // Values [off, off + len) (both copies are f32 arrays).
  Vector slice(int64_t off, int64_t len) const {
    return Vector{host ? host + off : nullptr, device ? static_cast<const float*>(device) + off : nullptr, len};
  }
};

// A host view as a handle, for weights no backend has placed (routed experts
// before their source makes them resident).
inline Matrix host_matrix(const QMatrix& q) { return Matrix{q, nullptr}; }

}  // namespace sluice
