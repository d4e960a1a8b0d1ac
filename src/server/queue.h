// First-in first-out turns for the one generation that runs at a time, with a
// bound on how many may wait.
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
  explicit GenerationQueue(size_t max_waiting) : max_waiting_(max_waiting) {}

  // A place in the queue; leaving it (destruction) lets the next one go.
  class Turn {
   public:
    ~Turn();
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    // Blocks until this turn is at the front (true), or until give_up() says so
    // (false; polled every 50 ms).
    bool wait(const std::function<bool()>& give_up = {});

   private:
    friend class GenerationQueue;
    Turn(GenerationQueue& q, uint64_t id) : q_(q), id_(id) {}
    GenerationQueue& q_;
    uint64_t id_;
  };

  // Joins at the back; nullptr when max_waiting requests already wait behind the running one.
  std::unique_ptr<Turn> join();
  int64_t waiting() const;  // not counting the one at the front
  int64_t running() const;  // 0 or 1

 private:
  size_t max_waiting_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<uint64_t> order_;
  uint64_t next_id_ = 0;
};

}  // namespace sluice::server
