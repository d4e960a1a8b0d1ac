// Which routed expert each fixed-size slot of a device's expert cache holds:
// lookup, pins while a product uses a slot, and least-recently-used reuse, on
// the slot table every expert tier shares (experts/expert_slot_table.h). Pure
// bookkeeping (no device calls), so it is tested without a GPU; the VRAM
// expert cache (experts/cuda/vram_experts.h) owns the memory behind it.
#pragma once
#include <cstddef>
#include <cstdint>

#include "experts/expert_slot_table.h"

namespace sluice {

class ExpertSlots {
 public:
  explicit ExpertSlots(int64_t slots) : table_(slots, EvictionPolicy::Lru) {}

  int64_t slots() const { return table_.slots(); }
  int64_t used() const { return table_.used(); }
  // The slot holding (layer, expert), or -1.
  int64_t find(int32_t layer, int32_t expert) const { return table_.find(expert_key(layer, expert)); }

  // A slot for (layer, expert), which must not be held: a free one (the lowest),
  // else the least recently used unpinned one, whose expert is dropped. -1 when
  // every slot is pinned (the caller then uses the expert without caching it).
  struct Claim {
    int64_t slot = -1;
    bool evicted = false;
    int32_t old_layer = -1, old_expert = -1;
  };
  Claim claim(int32_t layer, int32_t expert);
  // Forget what a slot holds (its copy failed); it becomes free.
  void drop(int64_t slot) { table_.release_slot(slot); }

  // A pinned slot is never reused; pins nest. Unpinning marks it most recently used.
  void pin(int64_t slot) { table_.pin(slot); }
  void unpin(int64_t slot) { table_.unpin(slot, /*touch_when_unpinned=*/true); }
  int pins(int64_t slot) const { return table_.pins(slot); }

 private:
  ExpertSlotTable table_;
};

}  // namespace sluice
