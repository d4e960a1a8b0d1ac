// What the kernel says about this process: bytes read from storage and memory high-water mark.
#pragma once
#include <cstdint>

namespace sluice {

uint64_t process_read_bytes();  // /proc/self/io read_bytes (storage reads, including O_DIRECT)
uint64_t process_peak_rss();    // /proc/self/status VmHWM, bytes
uint64_t process_rss();         // /proc/self/status VmRSS, bytes

}  // namespace sluice
