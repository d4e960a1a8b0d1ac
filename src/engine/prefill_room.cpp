#include "engine/prefill_room.h"

#include <algorithm>

namespace sluice {

int64_t lendable_slots(const PrefillRoom& r) {
  if (r.span_bytes == 0 || r.slot_bytes == 0 || r.slots >= r.experts) return 0;
  return std::max<int64_t>(0, r.slots - r.keep_slots);
}

PrefillPasses prefill_passes(const PrefillRoom& r) {
  const uint64_t per_token = std::max<uint64_t>(1, r.activation_bytes);
  PrefillPasses p;
  const int64_t whole = std::max<int64_t>(1, int64_t(r.room / per_token));
  p.chunk = whole;
  if (r.span_bytes == 0) return p;
  const int64_t chunk = std::max<int64_t>(1, int64_t(r.room / 4 / per_token));
  const uint64_t used = std::min(r.room, uint64_t(chunk) * per_token);
  const uint64_t rows = r.room - used + uint64_t(lendable_slots(r)) * r.slot_bytes;
  const int64_t span = int64_t(rows / r.span_bytes);
  if (span > whole) p = {chunk, span};
  return p;
}

int64_t span_loan_slots(const PrefillRoom& r, int64_t tokens, int64_t chunk) {
  if (tokens <= chunk || r.slot_bytes == 0) return 0;
  const uint64_t acts = std::min(r.room, uint64_t(std::max<int64_t>(1, chunk)) * r.activation_bytes);
  const uint64_t rows = uint64_t(tokens) * r.span_bytes, share = r.room - acts;
  if (rows <= share) return 0;
  const int64_t need = int64_t((rows - share + r.slot_bytes - 1) / r.slot_bytes);
  return std::min(need, lendable_slots(r));
}

}  // namespace sluice
