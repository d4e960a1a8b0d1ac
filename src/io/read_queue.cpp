#include "io/read_queue.h"

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "io/read_faults.h"
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

// One attempt at (part of) a read, as a backend sees it.
struct Attempt {
  int fd;
  uint64_t offset;
  uint32_t length;
  uint8_t* buffer;
  uint64_t id;
};

// What the kernel (io_uring or pread) reported for one attempt: bytes or -errno,
// short reads and -EINTR/-EAGAIN included; the RetryingQueue above deals with those.
struct RawResult {
  uint64_t id;
  int64_t res;
};

class ReadBackend {
 public:
  virtual ~ReadBackend() = default;
  virtual void submit(const Attempt& a) = 0;
  virtual void flush() = 0;
  virtual void reap(std::vector<RawResult>& out, bool block) = 0;  // block: wait for one if any are in flight
  virtual std::string name() const = 0;
};

// Submission never blocks: attempts beyond the ring's depth wait in `waiting_`
// and enter the ring as completions free entries (in reap). A caller with one
// queue per drive can therefore queue reads for every drive without being held
// up by the one that is full.
class IoUringBackend : public ReadBackend {
 public:
  explicit IoUringBackend(int depth) : depth_(depth) {
    int rc = io_uring_queue_init(unsigned(depth), &ring_, 0);
    if (rc < 0) throw Error(fmt::format("io_uring_queue_init: {}", std::strerror(-rc)));
  }
  ~IoUringBackend() override {
    std::vector<RawResult> sink;
    waiting_.clear();
    while (in_flight_ + unsubmitted_ > 0) reap(sink, true);
    io_uring_queue_exit(&ring_);
  }
  void submit(const Attempt& a) override {
    // At most `depth` in the ring, so the completion queue never overflows.
    if (!waiting_.empty() || in_flight_ + unsubmitted_ >= depth_) {
      waiting_.push_back(a);
      return;
    }
    enqueue(a);
  }
  void flush() override {
    while (unsubmitted_ > 0) {
      int rc = io_uring_submit(&ring_);
      if (rc == -EINTR || rc == -EAGAIN) continue;
      if (rc < 0) fail("io_uring_submit: {}", std::strerror(-rc));
      in_flight_ += rc;
      unsubmitted_ -= rc;
    }
  }
  void reap(std::vector<RawResult>& out, bool block) override {
    flush();
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
    while (!waiting_.empty() && in_flight_ + unsubmitted_ < depth_) {
      enqueue(waiting_.front());
      waiting_.pop_front();
    }
    flush();
  }
  std::string name() const override { return "io_uring"; }

 private:
  void enqueue(const Attempt& a) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {
      flush();
      sqe = io_uring_get_sqe(&ring_);
    }
    io_uring_prep_read(sqe, a.fd, a.buffer, a.length, a.offset);
    io_uring_sqe_set_data64(sqe, a.id);
    ++unsubmitted_;
  }

  io_uring ring_;
  int64_t depth_, in_flight_ = 0, unsubmitted_ = 0;
  std::deque<Attempt> waiting_;  // beyond the ring's depth, in submission order
};

// One pread per attempt on a pool of threads.
class ThreadsBackend : public ReadBackend {
 public:
  explicit ThreadsBackend(int threads) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~ThreadsBackend() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  void submit(const Attempt& a) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push_back(a);
      ++in_flight_;
    }
    work_cv_.notify_one();
  }
  void flush() override {}
  void reap(std::vector<RawResult>& out, bool block) override {
    std::unique_lock<std::mutex> lk(mu_);
    if (block) done_cv_.wait(lk, [&] { return !done_.empty() || in_flight_ == 0; });
    out.insert(out.end(), done_.begin(), done_.end());
    in_flight_ -= int64_t(done_.size());
    done_.clear();
  }
  std::string name() const override { return "pread-threads"; }

 private:
  void loop() {
    for (;;) {
      Attempt a;
      {
        std::unique_lock<std::mutex> lk(mu_);
        work_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (stop_ && queue_.empty()) return;
        a = queue_.front();
        queue_.pop_front();
      }
      const ssize_t n = ::pread(a.fd, a.buffer, a.length, off_t(a.offset));
      const int64_t res = n < 0 ? -int64_t(errno) : int64_t(n);
      {
        std::lock_guard<std::mutex> lk(mu_);
        done_.push_back({a.id, res});
      }
      done_cv_.notify_one();
    }
  }
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Attempt> queue_;
  std::vector<RawResult> done_;
  std::vector<std::thread> workers_;
  int64_t in_flight_ = 0;
  bool stop_ = false;
};

// Whole reads on top of a backend: a short completion has its remainder read
// again (fewer bytes are reported only at end of file), -EINTR and -EAGAIN are
// retried, other errors are reported. Optional injected faults sit between the
// backend and this logic (and reorder what it hands back).
class RetryingQueue : public ReadQueue {
 public:
  RetryingQueue(std::unique_ptr<ReadBackend> b, const ReadFaults& faults) : backend_(std::move(b)) {
    if (faults.any()) faults_.emplace(faults);
  }
  ~RetryingQueue() override {
    std::vector<ReadCompletion> sink;
    while (!pending_.empty()) reap(sink, true);
  }
  void submit(const ReadRequest& r) override {
    const uint64_t id = next_id_++;
    pending_.emplace(id, Pending{r, 0, 0});
    backend_->submit({r.fd, r.offset, r.length, r.buffer, id});
  }
  void flush() override { backend_->flush(); }
  void reap(std::vector<ReadCompletion>& out, bool block) override {
    const size_t first = out.size();
    std::vector<RawResult> raw;
    for (;;) {
      raw.clear();
      backend_->reap(raw, block && out.size() == first && !pending_.empty());
      bool resubmitted = false;
      for (const RawResult& c : raw) resubmitted |= settle(c, out);
      if (resubmitted) backend_->flush();
      if (pending_.empty() && held_) {
        out.push_back(*held_);
        held_.reset();
      }
      // A blocking reap returns only once a read is whole (or failed).
      if (!block || out.size() > first || pending_.empty()) break;
    }
  }
  int64_t in_flight() const override { return int64_t(pending_.size() + (held_ ? 1 : 0)); }
  std::string name() const override { return backend_->name(); }

 private:
  struct Pending {
    ReadRequest req;
    uint32_t done;  // bytes read so far
    int retries;    // -EINTR/-EAGAIN answers so far
  };
  static constexpr int kMaxRetries = 64;

  // Handles one raw completion; true when it submitted another attempt.
  bool settle(const RawResult& c, std::vector<ReadCompletion>& out) {
    auto it = pending_.find(c.id);
    if (it == pending_.end()) fail("read queue: completion for an unknown read {}", c.id);
    Pending& p = it->second;
    int64_t res = c.res;
    if (faults_)
      res = faults_->apply(p.req.offset, p.done == 0 && p.retries == 0, p.req.buffer + p.done, res);
    if ((res == -EINTR || res == -EAGAIN) && ++p.retries <= kMaxRetries) {
      backend_->submit(remainder(p, c.id));
      return true;
    }
    if (res > 0 && p.done + uint64_t(res) < p.req.length) {
      p.done += uint32_t(res);
      backend_->submit(remainder(p, c.id));
      return true;
    }
    const ReadCompletion done{p.req.tag, res < 0 ? res : int64_t(p.done) + res};  // res 0: end of file
    pending_.erase(it);
    if (!faults_ || !faults_->faults().reorder) {
      out.push_back(done);
    } else if (!held_ && !pending_.empty()) {  // reordering: held until the next read completes
      held_ = done;
    } else {
      out.push_back(done);
      if (held_) out.push_back(*held_);
      held_.reset();
    }
    return false;
  }
  static Attempt remainder(const Pending& p, uint64_t id) {
    return {p.req.fd, p.req.offset + p.done, p.req.length - p.done, p.req.buffer + p.done, id};
  }

  std::unique_ptr<ReadBackend> backend_;
  std::optional<FaultInjector> faults_;
  std::unordered_map<uint64_t, Pending> pending_;
  std::optional<ReadCompletion> held_;  // reordering: handed back after the next completion
  uint64_t next_id_ = 0;
};

}  // namespace

std::unique_ptr<ReadQueue> ReadQueue::create(Kind kind, int depth) {
  const ReadFaults faults = ReadFaults::from_environment();
  std::unique_ptr<ReadBackend> b;
  if (kind != Kind::Threads) {
    try {
      b = std::make_unique<IoUringBackend>(depth);
    } catch (const Error&) {
      if (kind == Kind::IoUring) throw;
    }
  }
  if (!b) b = std::make_unique<ThreadsBackend>(std::min(depth, 16));
  return std::make_unique<RetryingQueue>(std::move(b), faults);
}

}  // namespace sluice
