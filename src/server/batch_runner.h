// The thread that runs the batch scheduler (chat/batch_scheduler.h) for the
// server: HTTP workers submit their requests from their own threads, this
// thread admits them at the next step and runs passes while any request is
// running or waiting, and sleeps when none is.
#pragma once
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "chat/batch_scheduler.h"

namespace sluice::server {

class BatchRunner {
 public:
  explicit BatchRunner(chat::BatchScheduler& scheduler);
  ~BatchRunner();  // after the requests it runs have finished (the workers wait for them)
  BatchRunner(const BatchRunner&) = delete;
  BatchRunner& operator=(const BatchRunner&) = delete;

  // Thread-safe. The job's callbacks run on the runner's thread.
  void submit(chat::BatchScheduler::Job job);

 private:
  void loop();
  chat::BatchScheduler& scheduler_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<chat::BatchScheduler::Job> submitted_;
  bool quit_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace sluice::server
