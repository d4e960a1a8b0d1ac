// What the conversation layer reports while it generates: prompt tokens fed
// and reused, time per generated token, prefill progress, the expert source's
// counters and speculation. The server's Metrics renders them for /metrics;
// `sluice chat` keeps this no-op base.
#pragma once
#include <cstdint>

#include "compute/expert_source.h"
#include "runtime/speculative.h"

namespace sluice::chat {

class GenerationCounters {
 public:
  virtual ~GenerationCounters() = default;
  virtual void add_prompt(int64_t /*tokens*/, int64_t /*reused*/, double /*prefill_seconds*/) {}
  virtual void add_token(double /*seconds*/) {}  // one generated token and the time it took
  // The prompt being prefilled now: positions in the state of `total` (0, 0: none).
  virtual void set_prefill_progress(int64_t /*done*/, int64_t /*total*/) {}
  // The routed-expert source's counters, as of the generation thread's last snapshot.
  virtual void set_expert_stats(const ExpertStats& /*s*/) {}
  // One request's speculation: passes, drafts proposed and accepted, the gate's state, the drafter's index.
  virtual void add_speculation(const SpeculationStats& /*s*/) {}
  // The prompt cache after a prefill: conversations kept in memory (the running one
  // included) and their state's bytes; saved state files and their bytes.
  virtual void set_prompt_cache(int64_t /*slots*/, uint64_t /*memory_bytes*/, int64_t /*files*/,
                                uint64_t /*disk_bytes*/) {}
  // Its checkpoints in memory (states at message boundaries) and their bytes.
  virtual void set_prompt_checkpoints(int64_t /*count*/, uint64_t /*bytes*/) {}
  // One decode pass of the batch scheduler over `sequences` requests together.
  virtual void add_batch_pass(int64_t /*sequences*/) {}
};

}  // namespace sluice::chat
