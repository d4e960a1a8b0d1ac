// A one-line progress display on stderr: done/total bytes, rate and ETA.
// Redraws at most a few times a second; silent when disabled.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace sluice {

class Progress {
 public:
  Progress(std::string label, uint64_t total, bool enabled);
  void update(uint64_t done);
  void finish();

 private:
  void draw(uint64_t done, bool final);
  std::string label_;
  uint64_t total_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_, last_;
  uint64_t done_ = 0;
};

std::string human_bytes(double bytes);
// In binary units, as --ram and --vram count: "12.50 GiB", "300.0 MiB", "4.0 KiB".
std::string binary_bytes(uint64_t bytes);

}  // namespace sluice
