#include "experts/expert_slot_table.h"

#include "util/error.h"

namespace sluice {

std::optional<EvictionPolicy> eviction_policy_from(std::string_view name) {
  if (name == "lru") return EvictionPolicy::Lru;
  if (name == "lfu") return EvictionPolicy::Lfu;
  if (name == "heat") return EvictionPolicy::Heat;
  return std::nullopt;
}

EvictionPolicy parse_eviction_policy(std::string_view name) {
  auto p = eviction_policy_from(name);
  if (!p) fail("expert cache policy '{}' is not one of lru, lfu, heat", name);
  return *p;
}

std::string_view eviction_policy_name(EvictionPolicy p) {
  switch (p) {
    case EvictionPolicy::Lfu: return "lfu";
    case EvictionPolicy::Heat: return "heat";
    case EvictionPolicy::Lru: break;
  }
  return "lru";
}

ExpertSlotTable::ExpertSlotTable(int64_t slots, EvictionPolicy policy)
    : policy_(policy), slot_(size_t(slots > 0 ? slots : 0)) {
  for (int64_t s = 0; s < int64_t(slot_.size()); ++s) free_.insert(free_.end(), s);
}

ExpertSlotTable::Slot& ExpertSlotTable::at(int64_t slot, const char* what) {
  if (slot < 0 || slot >= int64_t(slot_.size())) fail("internal: {} expert slot {} of {}", what, slot, slot_.size());
  return slot_[size_t(slot)];
}

double ExpertSlotTable::first_criterion(const Slot& s) const {
  switch (policy_) {
    case EvictionPolicy::Lfu: return double(s.uses);
    case EvictionPolicy::Heat: {
      auto it = heat_.find(s.key);
      return it == heat_.end() ? 0.0 : it->second;
    }
    case EvictionPolicy::Lru: break;
  }
  return 0.0;
}

void ExpertSlotTable::rank(int64_t slot) {
  Slot& s = slot_[size_t(slot)];
  s.rank = first_criterion(s);
  order_.insert(Rank{s.rank, s.last_use, slot});
}

void ExpertSlotTable::unrank(int64_t slot) {
  const Slot& s = slot_[size_t(slot)];
  order_.erase(Rank{s.rank, s.last_use, slot});
}

void ExpertSlotTable::assign(int64_t slot, uint64_t key) {
  Slot& s = at(slot, "assigning");
  if (where_.count(key)) fail("internal: expert {} of layer {} claimed twice", expert_key_expert(key), expert_key_layer(key));
  if (s.held) {
    if (s.pins > 0) fail("internal: reusing pinned expert slot {}", slot);
    unrank(slot);
    where_.erase(s.key);
  } else {
    if (s.withdrawn) fail("internal: assigning withdrawn expert slot {}", slot);
    free_.erase(slot);
  }
  s.held = true;
  s.key = key;
  s.pins = 0;
  s.uses = 0;
  s.last_use = ++tick_;
  where_[key] = slot;
  rank(slot);
}

void ExpertSlotTable::release_slot(int64_t slot) {
  Slot& s = at(slot, "releasing");
  if (!s.held) return;
  if (s.pins == 0) unrank(slot);
  where_.erase(s.key);
  s = Slot{};
  free_.insert(slot);
}

void ExpertSlotTable::withdraw(int64_t slot) {
  Slot& s = at(slot, "withdrawing");
  if (s.held) fail("internal: withdrawing expert slot {}, which holds an expert", slot);
  if (s.withdrawn) return;
  s.withdrawn = true;
  free_.erase(slot);
}

void ExpertSlotTable::return_slot(int64_t slot) {
  Slot& s = at(slot, "returning");
  if (!s.withdrawn) return;
  s.withdrawn = false;
  free_.insert(slot);
}

void ExpertSlotTable::use(int64_t slot) {
  Slot& s = at(slot, "using");
  if (!s.held) fail("internal: using free expert slot {}", slot);
  if (s.pins == 0) unrank(slot);
  if (policy_ == EvictionPolicy::Heat) heat_[s.key] += 1.0;
  ++s.pins;
  ++s.uses;
  s.last_use = ++tick_;
}

void ExpertSlotTable::pin(int64_t slot) {
  Slot& s = at(slot, "pinning");
  if (!s.held) fail("internal: pinning free expert slot {}", slot);
  if (s.pins == 0) unrank(slot);
  ++s.pins;
}

void ExpertSlotTable::unpin(int64_t slot, bool touch_when_unpinned) {
  Slot& s = at(slot, "unpinning");
  if (!s.held || s.pins <= 0) fail("internal: unpinning expert slot {} that is not pinned", slot);
  if (--s.pins > 0) return;
  if (touch_when_unpinned) s.last_use = ++tick_;
  rank(slot);
}

void ExpertSlotTable::set_heat(std::unordered_map<uint64_t, double> heat) {
  if (!where_.empty()) fail("internal: expert heat set while the cache holds experts");
  heat_ = std::move(heat);
}

}  // namespace sluice
