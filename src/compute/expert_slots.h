// Which routed expert each fixed-size slot of a device's expert cache holds:
// lookup, pins while a product uses a slot, and least-recently-used reuse.
// Pure bookkeeping (no device calls), so it is tested without a GPU; the VRAM
// expert cache (compute/cuda/vram_experts.h) owns the memory behind it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <utility>
#include <vector>

namespace sluice {

class ExpertSlots {
 public:
  explicit ExpertSlots(int64_t slots);

  int64_t slots() const { return int64_t(slot_.size()); }
  int64_t used() const { return int64_t(where_.size()); }
  // The slot holding (layer, expert), or -1.
  int64_t find(int32_t layer, int32_t expert) const;

  // A slot for (layer, expert), which must not be held: a free one, else the
  // least recently used unpinned one, whose expert is dropped. -1 when every
  // slot is pinned (the caller then uses the expert without caching it).
  struct Claim {
    int64_t slot = -1;
    bool evicted = false;
    int32_t old_layer = -1, old_expert = -1;
  };
  Claim claim(int32_t layer, int32_t expert);
  // Forget what a slot holds (its copy failed); it becomes free.
  void drop(int64_t slot);

  // A pinned slot is never reused; pins nest. Unpinning marks it most recently used.
  void pin(int64_t slot);
  void unpin(int64_t slot);
  int pins(int64_t slot) const { return slot_[size_t(slot)].pins; }

 private:
  using Key = std::pair<int32_t, int32_t>;
  struct Slot {
    bool held = false;
    Key key{-1, -1};
    int pins = 0;
    std::list<int64_t>::iterator lru;  // position in lru_ while held and unpinned
    bool in_lru = false;
  };
  void lru_remove(Slot& s);
  std::vector<Slot> slot_;
  std::map<Key, int64_t> where_;
  std::vector<int64_t> free_;
  std::list<int64_t> lru_;  // unpinned held slots, least recently used first
};

}  // namespace sluice
