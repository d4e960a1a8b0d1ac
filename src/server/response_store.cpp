#include "server/response_store.h"

#include <algorithm>

namespace sluice::server {

ResponseStore::ResponseStore(size_t max_responses, size_t max_bytes)
    : max_responses_(max_responses), max_bytes_(max_bytes) {}

void ResponseStore::put(const std::string& id, Entry e) {
  const size_t n = e.response.dump().size() + e.conversation.dump().size();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = held_.find(id); it != held_.end()) {
    bytes_ -= it->second.bytes;
    held_.erase(it);
    order_.erase(std::find(order_.begin(), order_.end(), id));
  }
  if (n > max_bytes_ || max_responses_ == 0) return;
  while (!order_.empty() && (held_.size() + 1 > max_responses_ || bytes_ + n > max_bytes_)) {
    auto it = held_.find(order_.front());
    bytes_ -= it->second.bytes;
    held_.erase(it);
    order_.pop_front();
  }
  held_.emplace(id, Held{std::move(e), n});
  order_.push_back(id);
  bytes_ += n;
}

std::optional<ResponseStore::Entry> ResponseStore::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(id);
  if (it == held_.end()) return std::nullopt;
  return it->second.entry;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(id);
  if (it == held_.end()) return false;
  bytes_ -= it->second.bytes;
  held_.erase(it);
  order_.erase(std::find(order_.begin(), order_.end(), id));
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_.size();
}

size_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace sluice::server
