// Asynchronous positional reads with many requests in flight: io_uring where
// the kernel allows it, otherwise a pool of threads calling pread. Requests
// are completed in any order; the caller matches them by tag. A completion is
// for the whole read: short reads are continued and -EINTR/-EAGAIN retried
// inside the queue (SLUICE_READ_FAULTS injects such faults for tests, see
// read_faults.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sluice {

struct ReadRequest {
  int fd = -1;
  uint64_t offset = 0;
  uint32_t length = 0;
  uint8_t* buffer = nullptr;
  uint64_t tag = 0;
};

struct ReadCompletion {
  uint64_t tag = 0;
  int64_t result = 0;  // bytes read (fewer than asked only at end of file), or -errno
};

class ReadQueue {
 public:
  virtual ~ReadQueue() = default;
  // Queues a read; it is in flight after the next flush() at the latest.
  virtual void submit(const ReadRequest& r) = 0;
  virtual void flush() = 0;
  // Appends finished reads to `out`; waits for at least one when `block` and any are in flight.
  virtual void reap(std::vector<ReadCompletion>& out, bool block) = 0;
  virtual int64_t in_flight() const = 0;
  virtual std::string name() const = 0;

  enum class Kind { Auto, IoUring, Threads };
  static std::unique_ptr<ReadQueue> create(Kind kind, int depth);
};

// Opens a file for reading with O_DIRECT when the filesystem supports it
// (*direct tells which); falls back to buffered reads otherwise.
int open_for_reads(const std::string& path, bool want_direct, bool* direct);

constexpr uint64_t kDirectAlign = 4096;

}  // namespace sluice
