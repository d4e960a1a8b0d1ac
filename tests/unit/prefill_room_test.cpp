// The prefill sizing rule on its own numbers (engine/prefill_room.h): a chunk takes a
// quarter of the room, a span's rows the rest plus the expert cache's slots beyond one
// layer's experts when the cache cannot hold every expert; a span borrows only the whole
// slots its rows need beyond that share.
#include <gtest/gtest.h>

#include "engine/prefill_room.h"

namespace sluice::prefill_room_test {
namespace {

// 1 MiB of room, 1 KiB of activations and 256 bytes of lasting rows per token; a cache of
// 100 slots of 4 KiB for 300 experts, 40 per layer at most.
PrefillRoom example() {
  PrefillRoom r;
  r.room = 1 << 20;
  r.activation_bytes = 1024;
  r.span_bytes = 256;
  r.slot_bytes = 4096;
  r.slots = 100;
  r.keep_slots = 40;
  r.experts = 300;
  return r;
}

TEST(PrefillRoom, WithoutACacheTheSpanTakesTheRoomLessAChunk) {
  PrefillRoom r = example();
  r.slot_bytes = 0, r.slots = 0;
  const PrefillPasses p = prefill_passes(r);
  EXPECT_EQ(p.chunk, int64_t(r.room / 4 / r.activation_bytes));
  EXPECT_EQ(p.span, int64_t((r.room - uint64_t(p.chunk) * r.activation_bytes) / r.span_bytes));
  EXPECT_EQ(lendable_slots(r), 0);
  EXPECT_EQ(span_loan_slots(r, 100 * p.span, p.chunk), 0);
  r.span_bytes = 0;  // no layer-by-layer passes: the chunk takes the whole room
  EXPECT_EQ(prefill_passes(r).chunk, int64_t(r.room / r.activation_bytes));
  EXPECT_EQ(prefill_passes(r).span, 0);
}

TEST(PrefillRoom, ASpanBorrowsTheSlotsBeyondOneLayer) {
  const PrefillRoom r = example();
  PrefillRoom alone = r;
  alone.slot_bytes = 0, alone.slots = 0;
  const PrefillPasses own = prefill_passes(alone), p = prefill_passes(r);
  ASSERT_EQ(lendable_slots(r), r.slots - r.keep_slots);
  EXPECT_EQ(p.chunk, own.chunk);
  const uint64_t share = r.room - uint64_t(p.chunk) * r.activation_bytes;
  const uint64_t lent = uint64_t(r.slots - r.keep_slots) * r.slot_bytes;
  EXPECT_EQ(p.span, int64_t((share + lent) / r.span_bytes));
  EXPECT_GT(p.span, own.span);
  // Up to the room's share nothing is borrowed; beyond it, whole slots for the rest.
  EXPECT_EQ(span_loan_slots(r, own.span, p.chunk), 0);
  const int64_t t = own.span + 100;
  EXPECT_EQ(span_loan_slots(r, t, p.chunk), int64_t((uint64_t(t) * r.span_bytes - share + r.slot_bytes - 1) / r.slot_bytes));
  EXPECT_EQ(span_loan_slots(r, p.span, p.chunk), int64_t((uint64_t(p.span) * r.span_bytes - share + r.slot_bytes - 1) / r.slot_bytes));
  EXPECT_LE(span_loan_slots(r, p.span, p.chunk), lendable_slots(r));
  // A longer span (given by hand) gets no more than the cache can lend; one chunk borrows nothing.
  EXPECT_EQ(span_loan_slots(r, 10 * p.span, p.chunk), lendable_slots(r));
  EXPECT_EQ(span_loan_slots(r, p.chunk, p.chunk), 0);
  // A shorter chunk leaves more of the room to the rows: less to borrow.
  EXPECT_LT(span_loan_slots(r, t, p.chunk / 2), span_loan_slots(r, t, p.chunk));
}

TEST(PrefillRoom, ACacheThatHoldsEveryExpertLendsNothing) {
  PrefillRoom r = example();
  r.slots = r.experts;
  EXPECT_EQ(lendable_slots(r), 0);
  r.slots = r.keep_slots;  // no slot beyond one layer's experts
  EXPECT_EQ(lendable_slots(r), 0);
  r.slots = r.keep_slots - 1;
  EXPECT_EQ(lendable_slots(r), 0);
}

}  // namespace
}  // namespace sluice::prefill_room_test
