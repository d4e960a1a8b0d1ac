#include "io/read_faults.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "util/error.h"

namespace sluice {

namespace {

std::atomic<int64_t> g_injected{0};

double rate(const std::string& spec, const std::string& key, const std::string& value) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(v >= 0 && v <= 1))
    fail("read faults '{}': {} must be a probability in [0, 1], got '{}'", spec, key, value);
  return v;
}

}  // namespace

ReadFaults ReadFaults::parse(const std::string& spec) {
  ReadFaults f;
  size_t p = 0;
  while (p < spec.size()) {
    size_t q = spec.find(',', p);
    if (q == std::string::npos) q = spec.size();
    const std::string item = spec.substr(p, q - p);
    p = q + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (key == "reorder" && eq == std::string::npos)
      f.reorder = true;
    else if (key == "short")
      f.short_rate = rate(spec, key, value);
    else if (key == "retry")
      f.retry_rate = rate(spec, key, value);
    else if (key == "eio")
      f.eio_rate = rate(spec, key, value);
    else if (key == "seed" && !value.empty() && value.find_first_not_of("0123456789") == std::string::npos)
      f.seed = std::strtoull(value.c_str(), nullptr, 10);
    else
      fail("read faults '{}': unknown item '{}' (short=P, retry=P, eio=P, seed=N, reorder)", spec, item);
  }
  return f;
}

ReadFaults ReadFaults::from_environment() {
  const char* s = std::getenv("SLUICE_READ_FAULTS");
  return s ? parse(s) : ReadFaults{};
}

int64_t FaultInjector::injected_in_process() { return g_injected.load(); }

bool FaultInjector::chance(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

int64_t FaultInjector::apply(uint64_t offset, bool first, uint8_t* buffer, int64_t res) {
  if (res <= 0) return res;
  // The same reads fail every time: a hash of where they are, not a draw.
  if (f_.eio_rate > 0) {
    uint64_t h = (offset + 1) * 0x9E3779B97F4A7C15ull + f_.seed * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 29;
    if (double(h >> 11) / double(1ull << 53) < f_.eio_rate) {
      ++injected_;
      ++g_injected;
      std::memset(buffer, 0xA5, size_t(res));
      return -EIO;
    }
  }
  if (first && chance(f_.retry_rate)) {
    ++injected_;
    ++g_injected;
    std::memset(buffer, 0xA5, size_t(res));
    return injected_ % 2 ? -EINTR : -EAGAIN;
  }
  // Cut at a 4 KiB boundary so the rest stays a valid O_DIRECT read.
  if (res > 4096 && chance(f_.short_rate)) {
    ++injected_;
    ++g_injected;
    const int64_t cut = std::max<int64_t>(4096, res / 2 / 4096 * 4096);
    std::memset(buffer + cut, 0xA5, size_t(res - cut));
    return cut;
  }
  return res;
}

}  // namespace sluice
