// Keep-alives while a streamed reply has nothing to say (its prompt is being
// prefilled, or a long forward pass runs): a thread that calls `beat` whenever
// `interval` has passed since the last write, so clients and proxies with idle
// timeouts see bytes at least that often (issue 31: at least every 10 s).
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace sluice::server {

class Heartbeat {
 public:
  // `beat` runs on the heartbeat's thread with `mu` held: the caller's writes hold it too
  // and call touch() after each.
  Heartbeat(std::chrono::milliseconds interval, std::mutex& mu, std::function<void()> beat);
  ~Heartbeat();  // stops the thread (a beat in progress finishes first)
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;
  void touch();  // a write just happened (with `mu` held)

 private:
  void run();
  const std::chrono::milliseconds interval_;
  std::mutex& mu_;
  std::function<void()> beat_;
  std::condition_variable cv_;
  std::chrono::steady_clock::time_point last_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace sluice::server
