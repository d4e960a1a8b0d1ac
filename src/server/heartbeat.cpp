#include "server/heartbeat.h"

namespace sluice::server {

Heartbeat::Heartbeat(std::chrono::milliseconds interval, std::mutex& mu, std::function<void()> beat)
    : interval_(interval), mu_(mu), beat_(std::move(beat)), last_(std::chrono::steady_clock::now()) {
  thread_ = std::thread([this] { run(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Heartbeat::touch() { last_ = std::chrono::steady_clock::now(); }

void Heartbeat::run() {
  std::unique_lock lk(mu_);
  while (!stop_) {
    const auto due = last_ + interval_;
    if (std::chrono::steady_clock::now() >= due) {
      beat_();
      last_ = std::chrono::steady_clock::now();
      continue;
    }
    cv_.wait_until(lk, due);
  }
}

}  // namespace sluice::server
