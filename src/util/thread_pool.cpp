#include "util/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>

namespace sluice {

namespace {
// Set while this thread runs a share of some pool's job: a parallel_for from inside one (a kernel
// called by a parallel caller) runs on the calling thread instead of taking the pool again.
thread_local bool t_in_job = false;

struct InJob {
  bool was = t_in_job;
  InJob() { t_in_job = true; }
  ~InJob() { t_in_job = was; }
};
}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_share(int index) {
  int64_t b = int64_t(index) * job_chunk_;
  int64_t e = std::min(job_n_, b + job_chunk_);
  if (b < e) {
    const InJob in_job;
    (*job_)(b, e);
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      wake_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_share(index);
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int threads = size();
  grain = std::max<int64_t>(1, grain);
  int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
  if (chunks <= 1 || t_in_job) {
    fn(0, n);
    return;
  }
  // Only as many workers as there are chunks take part; the rest see an empty range.
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = (n + threads - 1) / threads;
    if (job_chunk_ < grain) job_chunk_ = grain;
    pending_ = int(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_share(0);
  std::unique_lock<std::mutex> lk(mu_);
  done_.wait(lk, [&] { return pending_ == 0; });
  job_ = nullptr;
}

namespace {
std::atomic<int> g_default_threads{0};
}

void ThreadPool::set_default_threads(int threads) { g_default_threads = threads; }

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(g_default_threads.load());
  return pool;
}

}  // namespace sluice
