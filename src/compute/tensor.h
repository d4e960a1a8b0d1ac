// Activation memory as model blocks see it. A Tensor is a view of a row-major
// f32 matrix [rows, cols] (row stride ld) in the backend's memory: host memory
// on the CPU, device memory on a GPU. Blocks slice views and hand them to the
// backend (compute/backend.h); they never read or write the values themselves.
// A Buffer owns such memory; caches grow theirs row by row.
#pragma once
#include <cstdint>

namespace sluice {

class Backend;

class Tensor {
 public:
  Tensor() = default;
  // Backends make views of their memory with this.
  Tensor(float* data, int64_t rows, int64_t cols, int64_t ld) : p_(data), rows_(rows), cols_(cols), ld_(ld) {}

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t ld() const { return ld_; }
  bool empty() const { return rows_ == 0 || cols_ == 0; }
  bool contiguous() const { return ld_ == cols_ || rows_ <= 1; }
  // Rows [r0, r0 + n).
  Tensor row_range(int64_t r0, int64_t n) const { return Tensor(p_ + r0 * ld_, n, cols_, ld_); }
  // Columns [c0, c0 + n) of every row.
  Tensor col_range(int64_t c0, int64_t n) const { return Tensor(p_ + c0, rows_, n, ld_); }

  // For backends only: the first value, in the backend's memory.
  float* data() const { return p_; }

 private:
  float* p_ = nullptr;
  int64_t rows_ = 0, cols_ = 0, ld_ = 0;
};

// Owned, zero-filled [rows, cols] memory of a backend. resize_rows() keeps the
// rows it had (growing the capacity geometrically, as caches append rows).
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend& be, int64_t rows, int64_t cols);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  Tensor view() const { return Tensor(p_, rows_, cols_, cols_); }
  operator Tensor() const { return view(); }
  Tensor row_range(int64_t r0, int64_t n) const { return view().row_range(r0, n); }
  void resize_rows(int64_t rows);
  // A copy of the same size on the same backend.
  Buffer clone() const;
  int64_t bytes() const { return rows_ * cols_ * int64_t(sizeof(float)); }

 private:
  void release();
  Backend* be_ = nullptr;
  float* p_ = nullptr;
  int64_t rows_ = 0, cols_ = 0, capacity_rows_ = 0;
};

}  // namespace sluice
