#include "util/cache_size.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace sluice {

size_t last_level_cache_bytes() {
  size_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string s;
    if (!(f >> s) || s.empty()) continue;
    size_t v = std::stoull(s);
    if (s.back() == 'K') v <<= 10;
    if (s.back() == 'M') v <<= 20;
    best = std::max(best, v);
  }
  if (best == 0) {
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    best = l3 > 0 ? size_t(l3) : size_t(32) << 20;
  }
  return best;
}

}  // namespace sluice
