#include "util/process_stats.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace sluice {

namespace {
uint64_t field(const char* path, const char* key, uint64_t mul) {
  FILE* f = std::fopen(path, "r");
  if (!f) return 0;
  char line[256];
  uint64_t v = 0;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, key, n) == 0) {
      v = std::strtoull(line + n, nullptr, 10) * mul;
      break;
    }
  std::fclose(f);
  return v;
}
}  // namespace

uint64_t process_read_bytes() { return field("/proc/self/io", "read_bytes:", 1); }
uint64_t process_peak_rss() { return field("/proc/self/status", "VmHWM:", 1024); }
uint64_t process_rss() { return field("/proc/self/status", "VmRSS:", 1024); }

}  // namespace sluice
