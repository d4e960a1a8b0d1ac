#include "server/batch_runner.h"

namespace sluice::server {

BatchRunner::BatchRunner(chat::BatchScheduler& scheduler) : scheduler_(scheduler), thread_([this] { loop(); }) {}

BatchRunner::~BatchRunner() {
  {
    std::lock_guard lk(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BatchRunner::submit(chat::BatchScheduler::Job job) {
  {
    std::lock_guard lk(mu_);
    submitted_.push_back(std::move(job));
  }
  cv_.notify_all();
}

void BatchRunner::loop() {
  for (;;) {
    std::vector<chat::BatchScheduler::Job> jobs;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return quit_ || !submitted_.empty() || !scheduler_.idle(); });
      if (quit_ && submitted_.empty() && scheduler_.idle()) return;
      jobs.swap(submitted_);
    }
    for (auto& j : jobs) scheduler_.add(std::move(j));
    scheduler_.step();
  }
}

}  // namespace sluice::server
