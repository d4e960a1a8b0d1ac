#include "compute/tensor.h"

#include <algorithm>
#include <utility>

#include "compute/backend.h"

namespace sluice {

Buffer::Buffer(Backend& be, int64_t rows, int64_t cols) : be_(&be), rows_(rows), cols_(cols), capacity_rows_(rows) {
  if (rows * cols > 0) p_ = be.allocate(rows * cols);
}

Buffer::~Buffer() { release(); }

void Buffer::release() {
  if (p_) be_->deallocate(p_);
  p_ = nullptr;
}

Buffer::Buffer(Buffer&& o) noexcept
    : be_(o.be_), p_(std::exchange(o.p_, nullptr)), rows_(std::exchange(o.rows_, 0)), cols_(std::exchange(o.cols_, 0)),
      capacity_rows_(std::exchange(o.capacity_rows_, 0)) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    be_ = o.be_;
    p_ = std::exchange(o.p_, nullptr);
    rows_ = std::exchange(o.rows_, 0);
    cols_ = std::exchange(o.cols_, 0);
    capacity_rows_ = std::exchange(o.capacity_rows_, 0);
  }
  return *this;
}

void Buffer::resize_rows(int64_t rows) {
  if (rows > capacity_rows_ && cols_ > 0) {
    const int64_t cap = std::max(rows, 2 * capacity_rows_);
    float* p = be_->allocate(cap * cols_);
    if (rows_ > 0) be_->copy(view(), Tensor(p, rows_, cols_, cols_));
    release();
    p_ = p;
    capacity_rows_ = cap;
  }
  rows_ = rows;
}

Buffer Buffer::clone() const {
  Buffer b(*be_, rows_, cols_);
  if (rows_ * cols_ > 0) be_->copy(view(), b.view());
  return b;
}

}  // namespace sluice
