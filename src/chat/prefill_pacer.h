// How long each prefill chunk of a prompt is. At most the plan's chunk (each
// distinct routed expert read once per chunk), and with a time target as many
// tokens as the rate measured on the chunks so far says take about that long:
// a chunk's cost grows with its position (attention reads every earlier
// position), so a fixed length cannot bound its time. What waits on a chunk
// (a gone client, a stopping server, other requests' decode steps) then waits
// about the target at most. Chunking never changes a logit, so the lengths
// are free to follow the clock.
#pragma once
#include <cstdint>

namespace sluice::chat {

class PrefillPacer {
 public:
  // limit: the plan's chunk (>= 1). target_seconds: 0 for chunks of `limit`.
  PrefillPacer(int64_t limit, double target_seconds);
  int64_t next() const { return next_; }  // tokens of the next chunk
  // A chunk of n tokens took `seconds`: the next one is sized from its rate
  // (growing at most fourfold per chunk, never below kMinTokens).
  void done(int64_t n, double seconds);

  static constexpr int64_t kFirstTokens = 64;  // before any rate is known
  static constexpr int64_t kMinTokens = 16;

 private:
  int64_t limit_;
  double target_;
  int64_t next_;
};

}  // namespace sluice::chat
