// The slot table every expert cache tier shares: the policy parsed from its
// name, which slot each policy gives up (and how ties go), pins, and the same
// victims as the two tables it replaced (the streaming reader's scan and the
// VRAM cache's LRU list), replayed here as references over random use.
#include <gtest/gtest.h>

#include <list>
#include <map>
#include <random>

#include "experts/expert_slot_table.h"
#include "experts/expert_slots.h"
#include "util/error.h"

namespace sluice::expert_slot_table_test {
namespace {

uint64_t K(int32_t e) { return expert_key(0, e); }

// Held slot `s` used once and released (an acquire and release).
void use_once(ExpertSlotTable& t, int64_t s) {
  t.use(s);
  t.unpin(s, false);
}

TEST(ExpertSlotTable, PolicyIsParsedFromItsName) {
  EXPECT_EQ(parse_eviction_policy("lru"), EvictionPolicy::Lru);
  EXPECT_EQ(parse_eviction_policy("lfu"), EvictionPolicy::Lfu);
  EXPECT_EQ(parse_eviction_policy("heat"), EvictionPolicy::Heat);
  for (auto p : {EvictionPolicy::Lru, EvictionPolicy::Lfu, EvictionPolicy::Heat})
    EXPECT_EQ(parse_eviction_policy(eviction_policy_name(p)), p);
  EXPECT_FALSE(eviction_policy_from("LRU"));
  EXPECT_FALSE(eviction_policy_from(""));
  try {
    parse_eviction_policy("mru");
    ADD_FAILURE() << "mru accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "expert cache policy 'mru' is not one of lru, lfu, heat");
  }
}

TEST(ExpertSlotTable, FreeSlotsGoFirstLowestIndexFirst) {
  ExpertSlotTable t(3, EvictionPolicy::Lru);
  EXPECT_EQ(t.victim(), 0);
  t.assign(0, K(10));
  t.assign(1, K(11));
  EXPECT_EQ(t.victim(), 2);  // a free slot beats any held one
  t.assign(2, K(12));
  EXPECT_EQ(t.used(), 3);
  t.release_slot(1);
  EXPECT_EQ(t.find(K(11)), -1);
  EXPECT_EQ(t.victim(), 1);
  t.release_slot(2);
  EXPECT_EQ(t.victim(), 1);  // the lowest free slot, not the last freed
  EXPECT_THROW(t.assign(1, K(10)), Error);  // held by slot 0 already
}

// A withdrawn slot (its memory lent to a prefill span) is never offered, held slots are
// evicted in its place, and once returned it is the first free slot again.
TEST(ExpertSlotTable, WithdrawnSlotsAreNotOfferedUntilReturned) {
  ExpertSlotTable t(3, EvictionPolicy::Lru);
  t.assign(0, K(10));
  t.withdraw(2);
  t.withdraw(2);  // withdrawing twice is once
  EXPECT_TRUE(t.withdrawn(2));
  EXPECT_EQ(t.victim(), 1);
  t.assign(1, K(11));
  EXPECT_EQ(t.victim(), 0) << "the least recently used held slot, not the withdrawn free one";
  EXPECT_THROW(t.assign(2, K(12)), Error);
  EXPECT_THROW(t.withdraw(0), Error) << "a slot that holds an expert is released before it is withdrawn";
  t.release_slot(0);
  t.withdraw(0);
  EXPECT_EQ(t.victim(), 1);
  t.return_slot(2);
  t.return_slot(0);
  EXPECT_FALSE(t.withdrawn(0));
  EXPECT_EQ(t.victim(), 0);
  t.assign(0, K(12));
  EXPECT_EQ(t.victim(), 2);
  EXPECT_EQ(t.used(), 2);
}

TEST(ExpertSlotTable, LruGivesUpTheLeastRecentlyUsed) {
  ExpertSlotTable t(3, EvictionPolicy::Lru);
  for (int e = 0; e < 3; ++e) t.assign(e, K(e));
  EXPECT_EQ(t.victim(), 0);  // loaded first
  use_once(t, 0);
  EXPECT_EQ(t.victim(), 1);
  use_once(t, 1);
  use_once(t, 1);  // how often does not matter
  EXPECT_EQ(t.victim(), 2);
  t.assign(2, K(7));  // a load is a use
  EXPECT_EQ(t.find(K(2)), -1);
  EXPECT_EQ(t.find(K(7)), 2);
  EXPECT_EQ(t.victim(), 0);
}

TEST(ExpertSlotTable, LfuGivesUpTheLeastUsedThenTheLeastRecent) {
  ExpertSlotTable t(3, EvictionPolicy::Lfu);
  for (int e = 0; e < 3; ++e) t.assign(e, K(e));
  use_once(t, 0);
  use_once(t, 0);
  use_once(t, 2);
  use_once(t, 1);
  // Uses 2, 1, 1: slots 1 and 2 tie on uses; 2 was used longer ago.
  EXPECT_EQ(t.victim(), 2);
  use_once(t, 2);
  EXPECT_EQ(t.victim(), 1);  // 2, 1, 2 uses
  // Uses count since the load: a reloaded slot starts from none.
  t.assign(1, K(9));
  use_once(t, 0);
  use_once(t, 2);
  EXPECT_EQ(t.victim(), 1);
  // The same uses under lru give up the least recent instead.
  ExpertSlotTable l(3, EvictionPolicy::Lru);
  for (int e = 0; e < 3; ++e) l.assign(e, K(e));
  use_once(l, 0);
  use_once(l, 0);
  use_once(l, 2);
  use_once(l, 1);
  EXPECT_EQ(l.victim(), 0);
}

TEST(ExpertSlotTable, HeatGivesUpTheColdestThenTheLeastRecent) {
  ExpertSlotTable t(3, EvictionPolicy::Heat);
  t.set_heat({{K(0), 5.0}, {K(1), 0.5}, {K(2), 0.5}, {K(3), 2.0}});
  for (int e = 0; e < 3; ++e) t.assign(e, K(e));
  EXPECT_EQ(t.victim(), 1);  // 0.5 and 0.5: slot 1 loaded earlier
  use_once(t, 1);            // heat 1.5 now
  EXPECT_EQ(t.victim(), 2);
  use_once(t, 2);
  use_once(t, 2);            // 2.5
  EXPECT_EQ(t.victim(), 1);
  t.assign(1, K(4));         // no heat recorded: 0
  EXPECT_EQ(t.victim(), 1);
  EXPECT_DOUBLE_EQ(t.heat().at(K(1)), 1.5);  // heat stays with the expert, not the slot
  EXPECT_DOUBLE_EQ(t.heat().at(K(2)), 2.5);
  EXPECT_THROW(t.set_heat({}), Error);  // only before anything is held
  // Uses add no heat under the other policies.
  ExpertSlotTable l(1, EvictionPolicy::Lru);
  l.assign(0, K(0));
  use_once(l, 0);
  EXPECT_TRUE(l.heat().empty());
}

TEST(ExpertSlotTable, PinnedAndRefusedSlotsAreSkipped) {
  ExpertSlotTable t(3, EvictionPolicy::Lru);
  for (int e = 0; e < 3; ++e) t.assign(e, K(e));
  t.use(0);  // pinned until unpinned
  EXPECT_EQ(t.pins(0), 1);
  EXPECT_EQ(t.victim(), 1);
  EXPECT_EQ(t.victim([](int64_t s) { return s != 1; }), 2);
  EXPECT_EQ(t.victim([](int64_t s) { return s == 0; }), -1);  // slot 0 is pinned
  t.pin(1);
  t.pin(1);  // pins nest
  t.pin(2);
  EXPECT_EQ(t.victim(), -1);
  t.unpin(1, false);
  EXPECT_EQ(t.victim(), -1);
  t.unpin(1, false);
  EXPECT_EQ(t.victim(), 1);
  EXPECT_THROW(t.unpin(1, false), Error);
  // Unpinning with a touch makes it the most recently used; without, it keeps its place.
  t.unpin(2, true);
  t.unpin(0, false);
  EXPECT_EQ(t.victim(), 1);
  t.pin(1);
  t.unpin(1, true);
  EXPECT_EQ(t.victim(), 0);
  EXPECT_THROW(t.assign(5, K(5)), Error);
  ExpertSlotTable none(0);
  EXPECT_EQ(none.victim(), -1);
}

// The streaming reader's eviction before the shared table: a scan over the
// slots, the first free one at once, else the best under the policy's
// comparison, kept unless a later slot is strictly better.
struct ScanReference {
  struct Slot {
    bool held = false;
    uint64_t key = ~0ull;
    int pins = 0;
    uint64_t last_use = 0, uses = 0;
  };
  std::string policy;
  std::vector<Slot> slots;
  std::unordered_map<uint64_t, double> heat;
  uint64_t tick = 0;
  template <class F>
  int64_t victim(F&& ok) const {
    int64_t best = -1;
    for (size_t i = 0; i < slots.size(); ++i) {
      const Slot& s = slots[i];
      if (!s.held) return int64_t(i);
      if (s.pins > 0 || !ok(int64_t(i))) continue;
      if (best < 0) {
        best = int64_t(i);
        continue;
      }
      const Slot& b = slots[size_t(best)];
      bool better;
      if (policy == "lfu") {
        better = s.uses < b.uses || (s.uses == b.uses && s.last_use < b.last_use);
      } else if (policy == "heat") {
        auto hs = heat.find(s.key), hb = heat.find(b.key);
        const double a = hs == heat.end() ? 0 : hs->second, c = hb == heat.end() ? 0 : hb->second;
        better = a < c || (a == c && s.last_use < b.last_use);
      } else {
        better = s.last_use < b.last_use;
      }
      if (better) best = int64_t(i);
    }
    return best;
  }
};

TEST(ExpertSlotTable, SameVictimsAsTheStreamingReadersScan) {
  for (const char* name : {"lru", "lfu", "heat"}) {
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      std::mt19937 rng(seed);
      const int64_t n = 1 + int64_t(rng() % 12);
      ScanReference ref;
      ref.policy = name;
      ref.slots.resize(size_t(n));
      ExpertSlotTable t(n, parse_eviction_policy(name));
      std::unordered_map<uint64_t, double> heat;
      for (int e = 0; e < 40; ++e)
        if (rng() % 2) heat[K(e)] = double(rng() % 4) * 0.5;  // many equal heats
      ref.heat = heat;
      t.set_heat(heat);
      std::vector<bool> refused(static_cast<size_t>(n));  // stands for reads in flight, wanted experts
      for (int step = 0; step < 3000; ++step) {
        for (auto&& r : refused) r = rng() % 5 == 0;
        auto ok = [&](int64_t s) { return !refused[size_t(s)]; };
        const int64_t want = ref.victim(ok);
        ASSERT_EQ(t.victim(ok), want) << name << " seed " << seed << " step " << step;
        const int64_t s = int64_t(rng() % uint64_t(n));
        ScanReference::Slot& rs = ref.slots[size_t(s)];
        switch (rng() % 6) {
          case 0:
          case 1: {  // a load into the victim
            if (want < 0) break;
            const uint64_t key = K(int32_t(rng() % 40));
            if (t.find(key) >= 0) break;
            t.assign(want, key);
            ref.slots[size_t(want)] = {true, key, 0, ++ref.tick, 0};
            break;
          }
          case 2:
          case 3:  // an acquire
            if (!rs.held) break;
            t.use(s);
            if (ref.policy == "heat") ref.heat[rs.key] += 1.0;
            ++rs.pins;
            ++rs.uses;
            rs.last_use = ++ref.tick;
            break;
          case 4:  // a release
            if (!rs.held || rs.pins == 0) break;
            t.unpin(s, false);
            --rs.pins;
            break;
          case 5:  // a failed read
            if (!rs.held || rs.pins > 0 || rng() % 4) break;
            t.release_slot(s);
            rs = {};
            break;
        }
        ASSERT_EQ(t.used(), int64_t(std::count_if(ref.slots.begin(), ref.slots.end(), [](auto& x) { return x.held; })));
      }
    }
  }
}

// The VRAM cache's table before the shared one: a free list (the last freed
// slot first) and a list of unpinned slots, least recently used first.
struct ListReference {
  std::vector<int64_t> free_;
  std::list<int64_t> lru;
  std::map<int64_t, std::pair<uint64_t, int>> held;  // slot -> key, pins
  explicit ListReference(int64_t n) {
    for (int64_t s = n - 1; s >= 0; --s) free_.push_back(s);
  }
  // The evicted key (~0: none), or nullopt when no slot could be had.
  std::optional<uint64_t> claim(uint64_t key, int64_t* slot) {
    uint64_t evicted = ~0ull;
    if (!free_.empty()) {
      *slot = free_.back();
      free_.pop_back();
    } else if (!lru.empty()) {
      *slot = lru.front();
      lru.pop_front();
      evicted = held[*slot].first;
    } else {
      return std::nullopt;
    }
    held[*slot] = {key, 0};
    lru.push_back(*slot);
    return evicted;
  }
};

TEST(ExpertSlotTable, ExpertSlotsEvictWhatTheirOwnListDid) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    const int64_t n = 1 + int64_t(rng() % 10);
    ExpertSlots slots(n);
    ListReference ref(n);
    // The same expert can sit in different slots of the two (after a drop the
    // old list reused the last freed slot, the table the lowest): compare by expert.
    std::map<uint64_t, int64_t> ref_slot;  // key -> reference slot
    std::vector<std::pair<int32_t, int32_t>> pinned;
    for (int step = 0; step < 3000; ++step) {
      const int32_t layer = int32_t(rng() % 3), e = int32_t(rng() % 12);
      const uint64_t key = expert_key(layer, e);
      switch (rng() % 4) {
        case 0:
        case 1: {  // an acquire: a hit pins, a miss claims a slot and pins it
          int64_t s = slots.find(layer, e);
          ASSERT_EQ(s >= 0, ref_slot.count(key) == 1);
          if (s < 0) {
            int64_t rs = -1;
            const auto want = ref.claim(key, &rs);
            const ExpertSlots::Claim c = slots.claim(layer, e);
            ASSERT_EQ(c.slot >= 0, want.has_value()) << "seed " << seed << " step " << step;
            if (c.slot < 0) break;
            ASSERT_EQ(c.evicted, *want != ~0ull);
            if (c.evicted) {
              ASSERT_EQ(expert_key(c.old_layer, c.old_expert), *want) << "seed " << seed << " step " << step;
              ref_slot.erase(*want);
            }
            ref_slot[key] = rs;
            s = c.slot;
          }
          slots.pin(s);
          const int64_t rs = ref_slot[key];
          if (ref.held[rs].second++ == 0) ref.lru.remove(rs);
          pinned.push_back({layer, e});
          break;
        }
        case 2: {  // a release
          if (pinned.empty()) break;
          const size_t i = rng() % pinned.size();
          const auto [l, x] = pinned[i];
          pinned.erase(pinned.begin() + std::ptrdiff_t(i));
          slots.unpin(slots.find(l, x));
          const int64_t rs = ref_slot[expert_key(l, x)];
          if (--ref.held[rs].second == 0) ref.lru.push_back(rs);
          break;
        }
        case 3: {  // a failed copy of an unpinned expert
          const int64_t s = slots.find(layer, e);
          if (s < 0 || slots.pins(s) > 0 || rng() % 3) break;
          slots.drop(s);
          const int64_t rs = ref_slot[key];
          ref_slot.erase(key);
          ref.lru.remove(rs);
          ref.held.erase(rs);
          ref.free_.push_back(rs);
          break;
        }
      }
      ASSERT_EQ(slots.used(), int64_t(ref_slot.size()));
    }
  }
}

}  // namespace
}  // namespace sluice::expert_slot_table_test
