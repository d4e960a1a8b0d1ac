// Progress of a long prefill, layer by layer: tokens done (a pass over a chunk
// counts its tokens in proportion to the layers it has finished), routed
// experts and bytes read so far, and an estimate of the time left. The CLI
// draws it on the terminal; the server can report it to a waiting client.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>

#include "compute/expert_source.h"

namespace sluice {

class Engine;

struct PrefillProgress {
  int64_t tokens_total = 0;
  double tokens_done = 0;          // whole chunks plus the finished layers' share of the current one
  uint64_t experts_read = 0;       // routed experts read from storage since the start
  uint64_t expert_bytes_read = 0;  // their bytes
  double seconds = 0;              // since the start
  double eta_seconds = 0;          // seconds * (left / done); 0 until something is done
};

// Watches `engine` while a prompt of `tokens` is fed in passes of `chunk`
// tokens (0: one pass), calling `report` after every layer of every pass.
// Only one meter (or other layer observer) per engine at a time.
class PrefillMeter {
 public:
  PrefillMeter(const Engine& engine, int64_t tokens, int64_t chunk, std::function<void(const PrefillProgress&)> report);
  ~PrefillMeter();
  PrefillMeter(const PrefillMeter&) = delete;
  PrefillMeter& operator=(const PrefillMeter&) = delete;
  const PrefillProgress& last() const { return p_; }

 private:
  void layer_done(int64_t layer);
  const Engine& engine_;
  int64_t chunk_, layers_;
  int64_t pass_ = 0;  // passes finished
  std::function<void(const PrefillProgress&)> report_;
  ExpertStats start_stats_;
  std::chrono::steady_clock::time_point start_;
  PrefillProgress p_;
};

}  // namespace sluice
