// Routed experts read from storage on demand into a bounded RAM cache.
//
// Each expert is one or a few byte extents in the released shards (or in an
// expert pack). Extents are read with O_DIRECT through a ReadQueue (io_uring,
// many reads in flight) into one 4 KiB-aligned cache slot per expert; the
// aligned range covering each extent is read and the inner bytes used. The
// expert's weight views are the resident table's views rebased into the slot,
// so the same kernels run on the same bytes and results are bitwise identical
// to the all-in-RAM path.
#pragma once
#include <atomic>
#include <chrono>
#include <deque>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compute/expert_source.h"
#include "experts/expert_slot_table.h"
#include "format/checkpoint.h"
#include "format/extent.h"
#include "io/read_queue.h"
#include "util/xxh3.h"

namespace sluice {

// Makes routed experts present in the local checkpoint files before they are
// read (stream mode: experts/remote_experts.h fetches them from the repository).
// StreamingExperts calls it from a single thread.
class ExpertFetcher {
 public:
  virtual ~ExpertFetcher() = default;
  // Every listed (layer, expert) is present locally when this returns (missing
  // ones are fetched, in parallel); present ones count as just used. Throws
  // sluice::Error naming the expert and URL when one cannot be fetched.
  virtual void ensure(const std::vector<std::pair<int32_t, int32_t>>& experts) = 0;
  virtual bool present(int32_t layer, int32_t expert) const = 0;
  // Expected XXH3-64 of the expert's bytes (in extent order), if known.
  virtual bool checksum(int32_t layer, int32_t expert, uint64_t* out) const = 0;
  // The local copy was found corrupt: forget it, so that ensure() fetches it again.
  virtual void invalidate(int32_t layer, int32_t expert) = 0;
};

struct StreamingOptions {
  uint64_t cache_bytes = 1ull << 30;
  std::string policy = "lru";  // lru | lfu | heat (use counts learned across runs, saved in heat_file)
  std::string heat_file;       // heat: where the per-expert use counts persist
  bool direct = true;          // O_DIRECT where supported
  ReadQueue::Kind queue = ReadQueue::Kind::Auto;
  int queue_depth = 128;  // per drive: each directory holding checkpoint files or packs has its own queue
  uint32_t chunk_bytes = 1u << 20;  // extents are split into reads of at most this size
  // Expected XXH3-64 of each expert's bytes (layer -> expert -> hash), from a
  // prepared manifest; empty: not verified.
  std::vector<std::vector<uint64_t>> checksums;
  // Touch every page of the cache once from user space, on a background
  // thread started with the cache (from its last slot backwards; fills take
  // free slots from the first). Some VMs (seen: Firecracker/PVM) charge ~9.5 us
  // per 4 KiB page on the first user-space access even after MAP_POPULATE and
  // after a DMA fill; once touched, later fills of the page cost nothing more.
  // Without this, whatever first reads a freshly filled slot (the checksum)
  // pays it, in the decode's critical path. Reads only: it never changes bytes.
  bool prefault = true;
  // Next-layer prediction is scored per layer in the background (each guess of
  // experts the cache lacks against what the router then asked for), also
  // while it is not acted on. A layer's guesses are read only while the share
  // of them that was right is at least this: below it, the reads were mostly
  // wasted bandwidth (and evictions) queued ahead of the layer's real misses.
  // 0: always read them.
  double prefetch_min_precision = 0.5;
  // Guessed reads in flight at most, per drive (of chunk_bytes each). The rest
  // of a guess waits here: when the router has run, the layer's real misses
  // are submitted at once, the guesses it chose go out too, and the unread
  // rest of the guesses it did not choose is dropped, so the real misses never
  // queue behind more than this much guessing. 0: every guessed read at once.
  int prefetch_window_reads = 32;
  // Stream mode: fetches experts missing from the local files on first use.
  // Null: every expert is read from the local files as they are.
  std::shared_ptr<ExpertFetcher> fetcher;
};

// What one drive served: the files of one directory (the checkpoint's, or an
// expert directory of `prepare --expert-dirs`) are read through one queue.
struct DriveStats {
  std::string dir;
  uint64_t bytes_read = 0;  // including alignment padding
  int64_t reads = 0;        // reads submitted (each at most StreamingOptions::chunk_bytes)
  double busy_seconds = 0;  // time with at least one of its reads in flight
};

// How the next-layer guess did for one layer: experts guessed that the cache
// lacked, how many of them the router then chose, and what became of them.
struct LayerPrefetchStats {
  uint64_t guessed = 0, right = 0;  // every guess, read or not
  uint64_t issued = 0;              // guessed experts actually read
  uint64_t skipped = 0;             // guessed experts not read: the layer's precision was too low
  uint64_t cancelled = 0;           // read, but dropped when the router chose otherwise (before all of it was read)
  double precision() const { return guessed ? double(right) / double(guessed) : 0; }
};

// The extents of an expert's weight views, merged and sorted by file position.
std::vector<ExpertExtent> expert_extents(const Checkpoint& ckpt, const ExpertWeights& w);

class StreamingExperts : public ExpertSource {
 public:
  StreamingExperts(const ExpertTable& table, const Checkpoint& ckpt, StreamingOptions opts);
  ~StreamingExperts() override;

  void request(int32_t layer, const int32_t* experts, int64_t n) override;
  bool ready(int32_t layer, int32_t expert) override;
  const ExpertWeights& acquire(int32_t layer, int32_t expert) override;
  void release(int32_t layer, int32_t expert) override;
  void prefetch(int32_t layer, const int32_t* experts, int64_t n) override;
  ExpertStats stats() const override { return stats_; }
  HostArena host_arena() const override { return {arena_, arena_bytes_}; }

  uint64_t slot_bytes() const { return slot_bytes_; }
  // Seconds the background prefault has spent so far, and whether it is done.
  double prefault_seconds() const { return double(prefault_ns_.load()) * 1e-9; }
  bool prefault_done() const { return prefault_done_.load(); }
  int64_t slots() const { return int64_t(slots_.size()); }
  EvictionPolicy policy() const { return slot_table_.policy(); }
  uint64_t cache_bytes() const { return slot_bytes_ * slots_.size(); }
  bool direct_io() const { return direct_; }
  std::string queue_name() const { return drives_.front().queue->name(); }
  // A long prefill's span borrows the cache's memory (engine/prefill_room.h): the last `n`
  // slots drop their experts and their pages go back to the system (the span's rows take
  // them) until take_back(). Only between passes (no expert pinned); reads in flight are
  // waited for first. Returns the bytes lent.
  uint64_t lend(int64_t n);
  // The lent slots become free slots again, their pages populated as at start-up.
  void take_back();
  int64_t lent_slots() const { return lent_; }
  // Per layer: how the next-layer guess did (layers never guessed are zero).
  std::vector<LayerPrefetchStats> prefetch_by_layer() const;
  // One entry per drive, in the order of the checkpoint files they hold.
  std::vector<DriveStats> drive_stats() const;

 private:
  struct Read {  // one aligned read into a slot
    int32_t file;
    uint64_t offset;  // aligned
    uint64_t length;  // aligned
    uint64_t slot_offset;
  };
  struct Plan {  // how to load one expert
    std::vector<Read> reads;
    std::vector<std::pair<uint64_t, uint64_t>> payload;  // (slot offset, length) of the exact expert bytes, in file order
    std::vector<std::pair<const uint8_t*, uint64_t>> rebase;  // original range start -> slot offset
    uint64_t bytes = 0, read_bytes = 0;
  };
  // Which expert a slot holds, its pins, uses and eviction order are in
  // slot_table_; a slot's fill (reads in flight, errors, weight views) is here.
  enum class SlotState : uint8_t { Free, Loading, Ready };
  struct Slot {
    uint64_t key = ~0ull;
    SlotState state = SlotState::Free;
    int32_t pending = 0;
    uint64_t acquired_epoch = 0;
    bool prefetched = false, used = false;
    int64_t error = 0;
    std::vector<int32_t> pending_on;  // reads still in flight, per drive
    ExpertWeights weights;
    // A guess: reads wait in the drive's backlog until the window has room.
    int32_t unsubmitted = 0;          // reads still in a backlog (counted in `pending`)
    bool cancelled = false;           // a guess not chosen: freed when its reads in flight end
    enum : uint8_t { kNotSubmitted = 0, kInFlight = 1, kDone = 2 };
    std::vector<uint8_t> read_state;  // per read of the plan
    std::vector<std::chrono::steady_clock::time_point> submitted_at;  // per read: when it went to the drive
    // Verification while the reads land: the payload is hashed in order up to
    // the end of the longest run of finished reads from the slot's start, so
    // when the last read finishes only its own bytes are left to hash.
    bool verify = false;
    uint64_t want = 0;                // expected XXH3-64 of the payload
    size_t reads_prefix = 0;          // reads [0, reads_prefix) are all done
    size_t hashed_piece = 0;          // payload piece being hashed
    uint64_t hashed_in_piece = 0;     // its bytes hashed so far
    std::unique_ptr<xxh3::State> hash;  // made at the slot's first verified load
  };

  static uint64_t key_of(int32_t layer, int32_t e) { return expert_key(layer, e); }
  const Plan& plan(int32_t layer, int32_t e) const;
  int64_t find(uint64_t key) const;
  int64_t start_load(int32_t layer, int32_t e, bool prefetch, bool allow_wanted = false);  // -1: no slot free
  int64_t victim(bool allow_wanted) const;
  // Reaps every drive's finished reads; with `block` and none finished, waits
  // on drive `wait_on` (or any drive with reads in flight).
  void drain(bool block, int32_t wait_on = -1);
  int32_t pending_drive(int64_t slot) const;  // a drive the slot still waits on
  void flush_all();
  int64_t in_flight() const;
  void finish_slot(int64_t s);
  void hash_landed(int64_t s);  // hashes the payload the finished reads cover, in order
  void submit_read(int64_t s, size_t r);  // read r of slot s's plan, to its drive's queue
  void pump();                            // backlog reads into the queues, within the window
  void promote(int64_t s);                // a guess was chosen: all its reads into the queues now
  void cancel(int64_t s);                 // a guess was not chosen: drop its unsubmitted reads
  void uncancel(int64_t s);               // chosen after all: submit what was dropped
  void free_slot(int64_t s);              // a dropped guess whose reads have all ended
  void fetch_missing(int32_t layer, const int32_t* experts, int64_t n);  // stream mode
  std::string describe(int32_t layer, int32_t e) const;

  const ExpertTable& table_;
  const Checkpoint& ckpt_;
  StreamingOptions opts_;
  std::vector<std::vector<Plan>> plans_;
  std::vector<int> fds_;
  bool direct_ = true;
  struct Drive {
    DriveStats stats;
    std::unique_ptr<ReadQueue> queue;
    std::deque<std::pair<int64_t, uint32_t>> backlog;  // guessed reads (slot, read) not yet submitted
    bool busy = false;
    std::chrono::steady_clock::time_point busy_since;
  };
  std::vector<Drive> drives_;
  std::vector<int32_t> drive_of_file_;  // checkpoint file -> index into drives_
  void note_busy(Drive& d);
  uint64_t slot_bytes_ = 0;
  // While acquire() waits: since when, and the bytes the drive delivered in that time (each read
  // that lands counts the share of its bytes that its time in flight overlapped the wait).
  bool waiting_ = false;
  std::chrono::steady_clock::time_point wait_since_;
  double landed_in_wait_ = 0;
  std::thread prefaulter_;
  std::atomic<bool> stop_prefault_{false}, prefault_done_{false};
  std::atomic<uint64_t> prefault_ns_{0};
  // Per slot, who may touch its pages first: the prefault thread reads a slot
  // only after claiming it, and a fill writes one only after the prefault of it
  // finished or was claimed away, so the two never access the same bytes at once.
  enum : uint8_t { kUntouched = 0, kPrefaulting = 1, kSettled = 2 };
  std::unique_ptr<std::atomic<uint8_t>[]> touch_;
  void prefault_arena();
  void settle_touch(int64_t s);  // before a fill writes slot s
  uint8_t* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  int64_t lent_ = 0;  // the last lent_ slots are lent (lend())
  std::vector<Slot> slots_;
  ExpertSlotTable slot_table_;
  std::unordered_map<uint64_t, uint64_t> wanted_;  // requested for the current layer: not evictable
  std::unordered_map<uint64_t, uint64_t> loaded_epoch_;  // request epoch of each expert's last load
  std::unordered_set<uint64_t> refetched_;  // stream mode: corrupt local copies fetched again
  uint64_t epoch_ = 0;
  ExpertStats stats_;
  struct LayerGuess {
    LayerPrefetchStats stats;
    std::vector<int32_t> pending;   // the last guess (experts the cache lacked), not yet scored
    bool have = false;
    double recent_guessed = 0, recent_right = 0;  // decayed counts: the precision now
  };
  std::vector<LayerGuess> guesses_;
  bool guess_reads(LayerGuess& g) const;  // is the layer's guess worth its reads?
  void score_guess(int32_t layer, const int32_t* experts, int64_t n);
  // Aligned reads covering the expert's extents, laid out back to back in a slot (reads of at most chunk_bytes).
  static Plan read_plan(const Checkpoint& ckpt, const ExpertWeights& w, uint64_t chunk_bytes);
  // One read queue per directory of the checkpoint's files (drive_of_file_, fds_).
  void open_drives(const Checkpoint& ckpt);
  void load_heat();  // heat policy: slot_table_'s heat from opts_.heat_file (uses in earlier runs, decayed)
  void save_heat() const;
};

}  // namespace sluice
