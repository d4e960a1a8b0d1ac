// The slot table of a routed-expert cache and its eviction policy, shared by
// every tier that keeps experts in fixed-size slots: the RAM cache of the
// streaming reader (experts/streaming_experts.h) and the VRAM cache
// (experts/expert_slots.h, experts/cuda/vram_experts.h). Pure bookkeeping:
// which expert each slot holds, pins while a product uses a slot, use counts,
// and which slot a new expert takes. The memory behind the slots, and any
// state of a slot's fill (reads in flight), belongs to the tier.
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice {

// Which held slot gives way to a new expert (a free slot is always taken first):
//   lru   the least recently used;
//   lfu   the one used least since it was loaded, then the least recently used;
//   heat  the one with the least heat (uses in earlier runs, decayed, plus this
//         run's; the tier loads and saves it), then the least recently used.
// Every assign and use is a new use time, so no two held slots tie (the order
// still ends on the lower slot).
enum class EvictionPolicy : uint8_t { Lru, Lfu, Heat };

// nullopt for a name that is not lru, lfu or heat.
std::optional<EvictionPolicy> eviction_policy_from(std::string_view name);
// Throws sluice::Error "expert cache policy 'NAME' is not one of lru, lfu, heat".
EvictionPolicy parse_eviction_policy(std::string_view name);
std::string_view eviction_policy_name(EvictionPolicy p);

// One key per (layer, expert).
inline uint64_t expert_key(int32_t layer, int32_t expert) {
  return (uint64_t(uint32_t(layer)) << 32) | uint32_t(expert);
}
inline int32_t expert_key_layer(uint64_t key) { return int32_t(key >> 32); }
inline int32_t expert_key_expert(uint64_t key) { return int32_t(uint32_t(key)); }

class ExpertSlotTable {
 public:
  explicit ExpertSlotTable(int64_t slots, EvictionPolicy policy = EvictionPolicy::Lru);

  EvictionPolicy policy() const { return policy_; }
  int64_t slots() const { return int64_t(slot_.size()); }
  int64_t used() const { return int64_t(where_.size()); }
  // The slot holding `key`, or -1.
  int64_t find(uint64_t key) const {
    auto it = where_.find(key);
    return it == where_.end() ? -1 : it->second;
  }
  bool held(int64_t slot) const { return slot_[size_t(slot)].held; }
  uint64_t key(int64_t slot) const { return slot_[size_t(slot)].key; }
  int32_t pins(int64_t slot) const { return slot_[size_t(slot)].pins; }

  // The slot a new expert should take: the free slot of lowest index, else the
  // held unpinned slot that `evictable(slot)` accepts and the policy ranks
  // first; -1 when there is none. Nothing changes until assign().
  template <class Evictable>
  int64_t victim(Evictable&& evictable) const {
    if (!free_.empty()) return *free_.begin();
    for (const Rank& r : order_)
      if (evictable(r.slot)) return r.slot;
    return -1;
  }
  int64_t victim() const {
    return victim([](int64_t) { return true; });
  }

  // The slot (free, or a held unpinned victim, whose key is forgotten) now
  // holds `key`, which no slot holds: unpinned, no uses, just used.
  void assign(int64_t slot, uint64_t key);
  // Forget what a slot holds; it becomes free.
  void release_slot(int64_t slot);
  // A free slot taken out of use (its memory lent, experts/streaming_experts.h lend): neither
  // free nor held, so victim() never offers it, until return_slot() makes it free again.
  void withdraw(int64_t slot);
  void return_slot(int64_t slot);
  bool withdrawn(int64_t slot) const { return slot_[size_t(slot)].withdrawn; }
  // One use of a held slot (an acquire): pinned once more, one more use (and
  // one more heat under heat), just used.
  void use(int64_t slot);
  // A pinned slot is never a victim; pins nest. pin() and unpin() do not count
  // a use; unpin(slot, true) marks the slot just used when its last pin goes.
  void pin(int64_t slot);
  void unpin(int64_t slot, bool touch_when_unpinned);

  // Heat per key (heat policy): set before any slot is held (loaded from a
  // file by the tier); grows by one per use().
  void set_heat(std::unordered_map<uint64_t, double> heat);
  const std::unordered_map<uint64_t, double>& heat() const { return heat_; }

 private:
  struct Slot {
    bool held = false;
    bool withdrawn = false;
    uint64_t key = ~0ull;
    int32_t pins = 0;
    uint64_t last_use = 0, uses = 0;
    double rank = 0;  // the policy's first criterion when ranked: 0 (lru), uses (lfu), heat (heat)
  };
  struct Rank {
    double first;
    uint64_t last_use;
    int64_t slot;
    bool operator<(const Rank& o) const {
      if (first != o.first) return first < o.first;
      if (last_use != o.last_use) return last_use < o.last_use;
      return slot < o.slot;
    }
  };
  double first_criterion(const Slot& s) const;
  void rank(int64_t slot);    // held and unpinned: into order_
  void unrank(int64_t slot);  // out of order_ (if there)
  Slot& at(int64_t slot, const char* what);

  EvictionPolicy policy_;
  std::vector<Slot> slot_;
  std::unordered_map<uint64_t, int64_t> where_;
  std::set<int64_t> free_;
  std::set<Rank> order_;  // held unpinned slots, the policy's first victim first
  std::unordered_map<uint64_t, double> heat_;
  uint64_t tick_ = 0;
};

}  // namespace sluice
