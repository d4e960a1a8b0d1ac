// The VRAM expert cache: an expert source in front of the host one (the
// mapped table, or the streaming reader and its RAM cache). An expert found
// in VRAM is used there without touching the host source; a miss is acquired
// from the host source (read from disk if it has to be), copied into a VRAM
// slot (least recently used reuse, experts/expert_slots.h), and released
// there at once. Requests and prefetches pass on only for experts not in VRAM,
// so the disk reads of a layer's misses start as soon as its router has run.
#pragma once
#include <map>
#include <memory>
#include <vector>

#include "compute/cuda/cuda_backend.h"
#include "compute/expert_source.h"
#include "experts/expert_slots.h"

namespace sluice {

class VramExperts : public ExpertSource {
 public:
  // `shapes` gives every expert's formats and sizes (slots fit the largest);
  // `owned` is the host source when this object should keep it alive.
  VramExperts(CudaBackend& be, ExpertSource& host, std::unique_ptr<ExpertSource> owned, const ExpertTable& shapes,
              uint64_t bytes);
  ~VramExperts() override;

  void request(int32_t layer, const int32_t* experts, int64_t n) override;
  bool ready(int32_t layer, int32_t expert) override;
  const ExpertWeights& acquire(int32_t layer, int32_t expert) override;
  void release(int32_t layer, int32_t expert) override;
  void prefetch(int32_t layer, const int32_t* experts, int64_t n) override;
  ExpertStats stats() const override;

  // When every expert fits: copy them all in now (so no token waits for a
  // copy); returns false, copying nothing, when they do not all fit.
  bool preload(const ExpertTable& shapes);
  // Beside host-computed experts (compute/host_experts.h): a fixed set fills the cache and stays,
  // every layer's experts in turn, lowest ids first, until the slots are full (all of them when
  // they fit); afterwards nothing is evicted, and on_device() tells the set apart. Returns how many.
  int64_t preload_fixed(const ExpertTable& shapes);
  bool on_device(int32_t layer, int32_t expert) const override { return frozen_ && slots_.find(layer, expert) >= 0; }

  int64_t slots() const { return slots_.slots(); }
  uint64_t slot_bytes() const { return slot_bytes_; }
  // Device bytes one expert takes (its three matrices with their scales).
  static uint64_t placed_bytes(const ExpertWeights& w);

 private:
  std::vector<int32_t> missing(int32_t layer, const int32_t* experts, int64_t n) const;
  CudaBackend& be_;
  ExpertSource& host_;
  std::unique_ptr<ExpertSource> owned_;
  uint64_t slot_bytes_ = 0;
  CudaBackend::DeviceBytes arena_;
  void* pinned_ = nullptr;  // the host source's RAM cache, page-locked while we copy from it
  ExpertSlots slots_;
  struct Placed {
    QMatrix gate, up, down;  // device views
    ExpertWeights w;         // handles pointing at them
    ExpertWeights host_view; // sizes only (its host bytes may be gone)
  };
  std::vector<Placed> placed_;
  std::map<std::pair<int32_t, int32_t>, int> passthrough_;  // acquired from the host source, uncached
  bool frozen_ = false;  // preload_fixed(): no slot changes hands
  uint64_t hits_ = 0, hit_bytes_ = 0, copied_ = 0;
  double copy_seconds_ = 0;
};

}  // namespace sluice
