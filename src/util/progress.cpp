#include "util/progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace sluice {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000.0 && u < 4) {
    b /= 1000.0;
    ++u;
  }
  return fmt::format("{:.1f} {}", b, units[u]);
}

std::string binary_bytes(uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", double(b) / double(1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", double(b) / double(1ull << 20));
  return fmt::format("{:.1f} KiB", double(b) / 1024.0);
}

Progress::Progress(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled), start_(std::chrono::steady_clock::now()), last_(start_) {}

void Progress::update(uint64_t done) {
  done_ = done;
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  const auto every = isatty(STDERR_FILENO) ? std::chrono::milliseconds(250) : std::chrono::milliseconds(5000);
  if (now - last_ < every) return;
  last_ = now;
  draw(done, false);
}

void Progress::finish() {
  if (enabled_) draw(done_, true);
}

void Progress::draw(uint64_t done, bool final) {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = secs > 0 ? double(done) / secs : 0.0;
  const double pct = total_ ? 100.0 * double(done) / double(total_) : 100.0;
  std::string eta = rate > 0 && total_ > done ? fmt::format(", ETA {:.0f} s", double(total_ - done) / rate) : "";
  const bool tty = isatty(STDERR_FILENO);
  std::fprintf(stderr, "%s%s: %s / %s (%.1f%%), %s/s%s%s", tty ? "\r\033[K" : "", label_.c_str(),
               human_bytes(double(done)).c_str(), human_bytes(double(total_)).c_str(), pct,
               human_bytes(rate).c_str(), eta.c_str(), final || !tty ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace sluice
