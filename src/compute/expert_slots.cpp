#include "compute/expert_slots.h"

#include "util/error.h"

namespace sluice {

ExpertSlots::ExpertSlots(int64_t slots) : slot_(size_t(slots > 0 ? slots : 0)) {
  for (int64_t s = slots - 1; s >= 0; --s) free_.push_back(s);
}

int64_t ExpertSlots::find(int32_t layer, int32_t expert) const {
  auto it = where_.find({layer, expert});
  return it == where_.end() ? -1 : it->second;
}

void ExpertSlots::lru_remove(Slot& s) {
  if (s.in_lru) lru_.erase(s.lru);
  s.in_lru = false;
}

ExpertSlots::Claim ExpertSlots::claim(int32_t layer, int32_t expert) {
  if (find(layer, expert) >= 0) fail("internal: expert {} of layer {} claimed twice", expert, layer);
  Claim c;
  if (!free_.empty()) {
    c.slot = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    c.slot = lru_.front();
    Slot& s = slot_[size_t(c.slot)];
    lru_remove(s);
    c.evicted = true;
    c.old_layer = s.key.first;
    c.old_expert = s.key.second;
    where_.erase(s.key);
  } else {
    return c;
  }
  Slot& s = slot_[size_t(c.slot)];
  s.held = true;
  s.key = {layer, expert};
  s.pins = 0;
  where_[s.key] = c.slot;
  lru_.push_back(c.slot);
  s.lru = std::prev(lru_.end());
  s.in_lru = true;
  return c;
}

void ExpertSlots::drop(int64_t slot) {
  Slot& s = slot_[size_t(slot)];
  if (!s.held) return;
  lru_remove(s);
  where_.erase(s.key);
  s = Slot{};
  free_.push_back(slot);
}

void ExpertSlots::pin(int64_t slot) {
  Slot& s = slot_[size_t(slot)];
  if (!s.held) fail("internal: pinning free expert slot {}", slot);
  lru_remove(s);
  ++s.pins;
}

void ExpertSlots::unpin(int64_t slot) {
  Slot& s = slot_[size_t(slot)];
  if (!s.held || s.pins <= 0) fail("internal: unpinning expert slot {} that is not pinned", slot);
  if (--s.pins == 0) {
    lru_.push_back(slot);
    s.lru = std::prev(lru_.end());
    s.in_lru = true;
  }
}

}  // namespace sluice
