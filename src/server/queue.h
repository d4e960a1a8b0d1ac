// First-in first-out turns for the generations that run at a time (one, or
// up to --parallel decoded together), with a bound on how many may wait.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace sluice::server {

class GenerationQueue {
 public:
  // `running`: turns that may be held at once (the first `running` in line).
  explicit GenerationQueue(size_t max_waiting, size_t running = 1)
      : max_waiting_(max_waiting), running_(running < 1 ? 1 : running) {}

  // A place in the queue; leaving it (destruction) lets the next one go.
  class Turn {
   public:
    ~Turn();
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    // Blocks until this turn is among the first `running` (true), or until give_up() says so
    // (false; polled every 50 ms).
    bool wait(const std::function<bool()>& give_up = {});

   private:
    friend class GenerationQueue;
    Turn(GenerationQueue& q, uint64_t id) : q_(q), id_(id) {}
    GenerationQueue& q_;
    uint64_t id_;
  };

  // Joins at the back; nullptr when max_waiting requests already wait behind the running ones.
  std::unique_ptr<Turn> join();
  int64_t waiting() const;  // not counting the running ones
  int64_t running() const;  // 0 up to `running`
  int64_t slots() const { return int64_t(running_); }

 private:
  size_t max_waiting_, running_;
  bool started(uint64_t id) const;  // among the first running_ (mu_ held)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<uint64_t> order_;
  uint64_t next_id_ = 0;
};

}  // namespace sluice::server
