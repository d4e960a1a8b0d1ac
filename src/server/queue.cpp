#include "server/queue.h"

#include <algorithm>
#include <chrono>

namespace sluice::server {

std::unique_ptr<GenerationQueue::Turn> GenerationQueue::join() {
  std::lock_guard lk(mu_);
  if (order_.size() >= max_waiting_ + running_) return nullptr;
  const uint64_t id = next_id_++;
  order_.push_back(id);
  return std::unique_ptr<Turn>(new Turn(*this, id));
}

bool GenerationQueue::started(uint64_t id) const {
  const size_t n = std::min(order_.size(), running_);
  return std::find(order_.begin(), order_.begin() + std::ptrdiff_t(n), id) != order_.begin() + std::ptrdiff_t(n);
}

bool GenerationQueue::Turn::wait(const std::function<bool()>& give_up) {
  std::unique_lock lk(q_.mu_);
  while (!q_.started(id_)) {
    if (give_up) {
      q_.cv_.wait_for(lk, std::chrono::milliseconds(50));
      if (!q_.started(id_) && give_up()) return false;
    } else {
      q_.cv_.wait(lk);
    }
  }
  return true;
}

GenerationQueue::Turn::~Turn() {
  {
    std::lock_guard lk(q_.mu_);
    q_.order_.erase(std::find(q_.order_.begin(), q_.order_.end(), id_));
  }
  q_.cv_.notify_all();
}

int64_t GenerationQueue::waiting() const {
  std::lock_guard lk(mu_);
  return order_.size() > running_ ? int64_t(order_.size() - running_) : 0;
}

int64_t GenerationQueue::running() const {
  std::lock_guard lk(mu_);
  return int64_t(std::min(order_.size(), running_));
}

}  // namespace sluice::server
