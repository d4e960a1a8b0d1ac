// The CPU's last-level cache: timings that must read their data from DRAM
// (the kernels benchmark, --experts-on auto's measurement of a host expert)
// cycle through more than it holds.
#pragma once
#include <cstddef>

namespace sluice {

// The last-level cache one core sees (sysfs; sysconf can report a whole
// socket's L3 inside a VM), 32 MiB when neither says.
size_t last_level_cache_bytes();

}  // namespace sluice
