// How a long prompt goes through the model within the memory its plan leaves it
// (Engine::prefill_chunk, prefill_span, forward_span): the rule, apart from the
// engine so it is tested on its own numbers.
//
// The room is three quarters of the plan's reserve (engine/memory_plan.h; 768 MiB's
// without a budget). Chunk by chunk, a pass is the chunk whose activations take all of
// it. Layer by layer (Model::forward_span), a chunk's activations take a quarter and a
// span's lasting rows the rest, plus what the routed-expert cache lends for the span:
//  - A span streams every layer's chosen experts through the cache, each once. When the
//    cache cannot hold every routed expert, that sweep (layer after layer, the same order
//    each span) evicts each expert before the next span asks for it again, so beyond the
//    experts one layer asks for at once, the cache's slots hold nothing a span finds
//    there: lending them for the span costs it no read. A cache that holds every expert
//    keeps them from span to span and lends nothing.
//  - The cache keeps one layer's experts (the largest layer's count): a MoE layer requests
//    the distinct experts of the whole span at once (a long span's tokens pick every
//    expert: 20k tokens x top 16 against K3's 896) and each is read once only if all fit
//    together; the guesses for the next layer take the slots of the finished layer's.
// The longest span is then (room - chunk activations + lendable slots) / span bytes per
// token; spans are used when that is longer than the whole-room chunk. A span of T tokens
// borrows only the slots its rows need beyond the room's share, and the cache gets them
// back when it ends (StreamingExperts::lend, take_back): the cache's slots in use, the
// span's rows and a chunk's activations stay within the cache and the room the plan gave.
#pragma once
#include <cstdint>

namespace sluice {

struct PrefillRoom {
  uint64_t room = 0;              // three quarters of the reserve
  uint64_t activation_bytes = 0;  // a chunk's activations per token
  uint64_t span_bytes = 0;        // a span's lasting rows per token (0: no layer-by-layer spans)
  // The routed-expert cache a span may borrow from (0 slots: none, or it cannot lend).
  uint64_t slot_bytes = 0;
  int64_t slots = 0;
  int64_t keep_slots = 0;  // slots the cache keeps during a span: the largest layer's experts
  int64_t experts = 0;     // routed experts in all: a cache with a slot for each lends nothing
};

struct PrefillPasses {
  int64_t chunk = 1;  // tokens per chunk
  int64_t span = 0;   // tokens per span (0: chunk by chunk)
};

// The cache slots a span may borrow at most (0 when it may not).
int64_t lendable_slots(const PrefillRoom& r);
PrefillPasses prefill_passes(const PrefillRoom& r);
// The slots a span of `tokens` in chunks of `chunk` borrows: what its rows need beyond the
// room less the chunk's activations, in whole slots, at most lendable_slots() (a longer span
// than the plan's, given by --prefill-span, gets no more). 0 for a span of one chunk.
int64_t span_loan_slots(const PrefillRoom& r, int64_t tokens, int64_t chunk);

}  // namespace sluice
