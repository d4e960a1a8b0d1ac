// Streams the spine layer by layer when it does not fit the RAM budget (Kimi
// K3's spine is 113 GB in bf16, 54 GB in int8).
//
// The checkpoint files are mapped private and writable; a layer is "loaded" by
// reading its spine bytes with O_DIRECT into their own mapped addresses (the
// pages become private copies with identical contents) and "dropped" with
// MADV_DONTNEED, which discards the copies. Weight pointers never change, so
// every block works unmodified, and a page touched before its read finished
// simply faults in the same bytes from the file: correctness never depends on
// the streamer, only speed and memory do.
//
// Everything outside the layers (embeddings, head) and the first layers that
// fit in the budget are read once at start and stay resident; the other layers
// are read ahead (the next `window` streamed layers while the current one
// computes) and dropped after use.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "format/extent.h"
#include "io/read_queue.h"
#include "io/spine_layout.h"

namespace sluice {

struct SpineStreamStats {
  uint64_t bytes_read = 0;
  double stall_seconds = 0;
  int64_t resident_layers = 0, streamed_layers = 0, window = 0;
  uint64_t resident_bytes = 0;
  uint64_t held_bytes = 0;  // what the spine would take with every layer resident (pages read)
};

class SpineStreamer {
 public:
  // `on_demand`: bytes (e.g. the embedding table, of which a token touches one
  // row) left to the page cache instead of being read up front.
  SpineStreamer(const Checkpoint& ckpt, const SpineLayout& layout, int64_t n_layers, uint64_t budget_bytes,
                const std::vector<ExpertExtent>& on_demand, int64_t window = 2, uint32_t chunk_bytes = 1u << 21,
                int queue_depth = 64);
  ~SpineStreamer();

  // The smallest budget streaming can work in: everything outside the layers plus the largest layer.
  static uint64_t min_budget(const SpineLayout& layout, int64_t n_layers, const std::vector<ExpertExtent>& on_demand);

  // The page-aligned ranges each layer streams (index n_layers: the resident
  // part, read once). A page is a layer's only if that layer's bytes fill it.
  using Range = ExpertExtent;  // page-aligned
  static std::vector<std::vector<Range>> ranges_of(const SpineLayout& layout, int64_t n,
                                                   const std::vector<ExpertExtent>& on_demand);

  void before_layer(int64_t l);  // waits until layer l's spine is in memory; reads ahead
  void after_layer(int64_t l);   // drops layer l if it is streamed
  SpineStreamStats stats() const { return stats_; }
  bool streams(int64_t l) const { return streamed_[size_t(l)]; }

 private:
  void issue(int64_t l);
  void make_anonymous(int64_t l);
  void drain(bool block);
  int64_t next_streamed(int64_t after) const;  // cyclic

  const Checkpoint& ckpt_;
  int64_t n_, window_;
  uint32_t chunk_;
  std::vector<std::vector<Range>> ranges_;
  std::vector<bool> streamed_;
  std::vector<bool> anonymous_;  // per layer, index n_ = outside layers: its pages made anonymous
  std::vector<int32_t> pending_;  // outstanding reads per layer, index n_ = outside layers (-1: not issued)
  std::vector<int> fds_;
  std::unique_ptr<ReadQueue> queue_;
  SpineStreamStats stats_;
};

}  // namespace sluice
