#include "experts/expert_slots.h"

#include "util/error.h"

namespace sluice {

ExpertSlots::Claim ExpertSlots::claim(int32_t layer, int32_t expert) {
  const uint64_t key = expert_key(layer, expert);
  if (table_.find(key) >= 0) fail("internal: expert {} of layer {} claimed twice", expert, layer);
  Claim c;
  c.slot = table_.victim();
  if (c.slot < 0) return c;
  if (table_.held(c.slot)) {
    c.evicted = true;
    c.old_layer = expert_key_layer(table_.key(c.slot));
    c.old_expert = expert_key_expert(table_.key(c.slot));
  }
  table_.assign(c.slot, key);
  return c;
}

}  // namespace sluice
