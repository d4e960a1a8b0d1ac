// Faults injected into a ReadQueue's raw completions, below its retry logic, so
// tests can show that streaming gives the same bytes (or a clear error) when the
// kernel returns short reads, -EINTR or -EAGAIN, completes out of order, or
// fails with -EIO. Set by SLUICE_READ_FAULTS, e.g. "short=0.3,retry=0.2,reorder,seed=7"
// or "eio=0.05"; for testing only.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace sluice {

struct ReadFaults {
  double short_rate = 0;  // completions cut to a 4 KiB-aligned part; the rest of the buffer is overwritten
  double retry_rate = 0;  // reads whose first completion is -EINTR or -EAGAIN (the buffer overwritten)
  bool reorder = false;   // completions handed back in reverse order, one of them a reap later
  double eio_rate = 0;    // reads that fail with -EIO on every attempt
  uint64_t seed = 1;

  bool any() const { return short_rate > 0 || retry_rate > 0 || reorder || eio_rate > 0; }
  // Parses "key=value,..." (keys short, retry, eio, seed; the flag reorder); throws Error naming a bad item.
  static ReadFaults parse(const std::string& spec);
  static ReadFaults from_environment();  // SLUICE_READ_FAULTS, or none
};

// Decides the fault for each raw completion; not thread-safe (the queue calls it from reap).
class FaultInjector {
 public:
  explicit FaultInjector(const ReadFaults& f) : f_(f), rng_(f.seed) {}
  const ReadFaults& faults() const { return f_; }
  // What a raw completion reports instead of `res` (the bytes the kernel read into
  // buffer). `first` tells whether this is the read's first attempt; `offset` is the
  // read's starting offset in its file (an -EIO read fails on every attempt).
  int64_t apply(uint64_t offset, bool first, uint8_t* buffer, int64_t res);
  int64_t injected() const { return injected_; }
  static int64_t injected_in_process();  // by every injector so far (tests check that faults happened)

 private:
  bool chance(double p);
  ReadFaults f_;
  std::mt19937_64 rng_;
  int64_t injected_ = 0;
};

}  // namespace sluice
