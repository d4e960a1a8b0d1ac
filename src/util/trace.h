// A process-wide timeline in Chrome / Perfetto trace-event JSON: `start(path)`
// begins recording, `stop()` writes {"traceEvents": [...]} to the path. While
// not recording every call returns at once (one relaxed atomic load).
// Events: complete spans ("X": compute of a layer, a wait, a checksum) and
// async begin/end pairs ("b"/"e": one expert's read, issued to completed).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace sluice::trace {

using Clock = std::chrono::steady_clock;

bool enabled();
void start(const std::string& path);
void stop();  // writes the file (errors name it); no-op when not recording
void span(const std::string& name, const char* cat, Clock::time_point t0, Clock::time_point t1);
void async_begin(const std::string& name, const char* cat, uint64_t id);
void async_end(const std::string& name, const char* cat, uint64_t id);

// A complete span from construction to destruction, when recording.
class Span {
 public:
  Span(const char* cat, std::string name) : on_(enabled()), cat_(cat), name_(on_ ? std::move(name) : std::string()) {
    if (on_) t0_ = Clock::now();
  }
  ~Span() {
    if (on_) span(name_, cat_, t0_, Clock::now());
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  bool on_;
  const char* cat_;
  std::string name_;
  Clock::time_point t0_;
};

}  // namespace sluice::trace
