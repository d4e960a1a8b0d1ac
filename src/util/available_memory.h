// The memory this process may still use, as Linux accounts it: MemAvailable of
// /proc/meminfo, and the limit of each memory cgroup the process is in (v1 or
// v2: its own cgroup and every ancestor up to the mount, whichever binds
// first) less what that cgroup holds beyond its inactive page cache (the
// "working set", which the kernel cannot simply drop). Without --ram the
// memory plan budgets from this (engine/memory_plan.h).
#pragma once
#include <cstdint>
#include <string>

namespace sluice {

struct AvailableMemory {
  uint64_t bytes = 0;          // the smaller of the two below that were read; 0: neither could be read
  uint64_t mem_available = 0;  // /proc/meminfo MemAvailable (0: not read)
  // The binding cgroup, when a memory limit applies to this process.
  bool cgroup_limited = false;
  std::string cgroup;          // its directory, e.g. /sys/fs/cgroup/memory/job
  uint64_t cgroup_limit = 0;   // memory.limit_in_bytes (v1), or memory.max / memory.high (v2)
  uint64_t cgroup_used = 0;    // charged to it less inactive page cache
  // "MemAvailable 20.1 GiB" or "cgroup /sys/fs/cgroup/memory/job: limit 512 MiB, 40 MiB in use"
  // (the one that binds, and the other when both were read).
  std::string describe() const;
};

// Reads the files above now. `root` is prepended to every path read
// (/proc/meminfo, /proc/self/cgroup, /proc/self/mountinfo, the cgroup files):
// tests point it at a directory of fake files.
AvailableMemory available_memory(const std::string& root = "");

}  // namespace sluice
