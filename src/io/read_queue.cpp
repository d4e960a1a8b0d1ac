#include "io/read_queue.h"

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "util/error.h"

namespace sluice {

int open_for_reads(const std::string& path, bool want_direct, bool* direct) {
  if (want_direct) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd >= 0) {
      *direct = true;
      return fd;
    }
    if (errno != EINVAL) fail("{}: cannot open: {}", path, std::strerror(errno));
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  *direct = false;
  return fd;
}

namespace {

class IoUringQueue : public ReadQueue {
 public:
  explicit IoUringQueue(int depth) : depth_(depth) {
    int rc = io_uring_queue_init(unsigned(depth), &ring_, 0);
    if (rc < 0) throw Error(fmt::format("io_uring_queue_init: {}", std::strerror(-rc)));
  }
  ~IoUringQueue() override {
    std::vector<ReadCompletion> sink;
    while (in_flight_ > 0) reap(sink, true);
    io_uring_queue_exit(&ring_);
  }
  void submit(const ReadRequest& r) override {
    while (in_flight_ + unsubmitted_ >= depth_) {  // keep the completion queue from overflowing
      flush();
      reap_into(parked_, true);
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {
      flush();
      sqe = io_uring_get_sqe(&ring_);
    }
    io_uring_prep_read(sqe, r.fd, r.buffer, r.length, r.offset);
    io_uring_sqe_set_data64(sqe, r.tag);
    ++unsubmitted_;
  }
  void flush() override {
    if (unsubmitted_ == 0) return;
    int rc = io_uring_submit(&ring_);
    if (rc < 0) fail("io_uring_submit: {}", std::strerror(-rc));
    in_flight_ += rc;
    unsubmitted_ -= rc;
  }
  void reap(std::vector<ReadCompletion>& out, bool block) override {
    flush();
    if (!parked_.empty()) {
      out.insert(out.end(), parked_.begin(), parked_.end());
      parked_.clear();
      block = false;
    }
    reap_into(out, block);
  }
  int64_t in_flight() const override { return in_flight_ + unsubmitted_ + int64_t(parked_.size()); }
  std::string name() const override { return "io_uring"; }

 private:
  void reap_into(std::vector<ReadCompletion>& out, bool block) {
    io_uring_cqe* cqe = nullptr;
    if (block && in_flight_ > 0) {
      int rc;
      do rc = io_uring_wait_cqe(&ring_, &cqe);
      while (rc == -EINTR);
      if (rc < 0) fail("io_uring_wait_cqe: {}", std::strerror(-rc));
    }
    while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe) {
      out.push_back({io_uring_cqe_get_data64(cqe), cqe->res});
      io_uring_cqe_seen(&ring_, cqe);
      --in_flight_;
    }
  }
  io_uring ring_;
  int64_t depth_, in_flight_ = 0, unsubmitted_ = 0;
  std::vector<ReadCompletion> parked_;
};

class ThreadPoolQueue : public ReadQueue {
 public:
  explicit ThreadPoolQueue(int threads) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~ThreadPoolQueue() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  void submit(const ReadRequest& r) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push_back(r);
      ++in_flight_;
    }
    work_cv_.notify_one();
  }
  void flush() override {}
  void reap(std::vector<ReadCompletion>& out, bool block) override {
    std::unique_lock<std::mutex> lk(mu_);
    if (block) done_cv_.wait(lk, [&] { return !done_.empty() || in_flight_ == 0; });
    for (auto& c : done_) out.push_back(c);
    in_flight_ -= int64_t(done_.size());
    done_.clear();
  }
  int64_t in_flight() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return in_flight_;
  }
  std::string name() const override { return "pread-threads"; }

 private:
  void loop() {
    for (;;) {
      ReadRequest r;
      {
        std::unique_lock<std::mutex> lk(mu_);
        work_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (stop_ && queue_.empty()) return;
        r = queue_.front();
        queue_.pop_front();
      }
      int64_t got = 0;
      while (got < int64_t(r.length)) {
        ssize_t n = ::pread(r.fd, r.buffer + got, r.length - uint32_t(got), off_t(r.offset + uint64_t(got)));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          got = -errno;
          break;
        }
        if (n == 0) break;
        got += n;
      }
      {
        std::lock_guard<std::mutex> lk(mu_);
        done_.push_back({r.tag, got});
      }
      done_cv_.notify_one();
    }
  }
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<ReadRequest> queue_;
  std::vector<ReadCompletion> done_;
  std::vector<std::thread> workers_;
  int64_t in_flight_ = 0;
  bool stop_ = false;
};

}  // namespace

std::unique_ptr<ReadQueue> ReadQueue::create(Kind kind, int depth) {
  if (kind != Kind::Threads) {
    try {
      return std::make_unique<IoUringQueue>(depth);
    } catch (const Error&) {
      if (kind == Kind::IoUring) throw;
    }
  }
  return std::make_unique<ThreadPoolQueue>(std::min(depth, 16));
}

}  // namespace sluice
