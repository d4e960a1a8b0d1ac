// Where MoE blocks get routed-expert weights from. The resident table serves
// views into the mapped checkpoint; the streaming source reads experts on
// demand into a bounded RAM cache (experts/streaming_experts.h). MoE blocks call
// request() as soon as the router has chosen, compute whatever is ready, and
// acquire()/release() each expert around its use.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "compute/expert_exchange.h"
#include "compute/weights.h"

namespace sluice {

struct HostExperts;

// One routed expert's weights: host views of its stored bytes (the source
// decides where they are; a GPU source adds its device copies).
struct ExpertWeights {
  // Separate gate/up, or one matrix with interleaved rows (2j = gate_j, 2j+1 = up_j, gpt-oss).
  Matrix gate, up, down;
  bool gate_up_interleaved = false;
  Vector gate_up_bias;  // interleaved like the rows (gpt-oss); lives in the spine
  Vector down_bias;
};

// Counters every source keeps (bytes are what was read from storage).
struct ExpertStats {
  uint64_t requests = 0, hits = 0, misses = 0;  // acquire() calls; found resident or not at request time
  uint64_t ready_hits = 0;  // of the hits, those already read (the rest was still being read: a guess in flight)
  uint64_t bytes_read = 0;                      // from storage, including alignment padding
  uint64_t bytes_needed = 0;                    // size of every acquired expert, cached or not
  double stall_seconds = 0;                     // time acquire() spent waiting for reads (not verifying them)
  uint64_t bytes_landed_while_stalled = 0;      // what the drive delivered during those waits (each read landing in
                                                // one counts the share of its time in flight inside the wait)
  double verify_seconds = 0;                    // time spent checking loaded experts' checksums
  uint64_t verified = 0;                        // experts whose checksum was checked
  uint64_t prefetch_issued = 0, prefetch_used = 0, prefetch_wasted = 0, prefetch_bytes = 0;
  uint64_t prefetch_wasted_bytes = 0;
  uint64_t reads_submitted = 0;
  uint64_t evictions = 0;
  uint64_t duplicate_loads = 0;  // an expert read twice for the same request (cache too small)
  // GPU: acquire() calls served from the VRAM expert cache, and bytes copied host -> device for experts.
  uint64_t device_hits = 0, device_bytes_copied = 0;
  double device_copy_seconds = 0;  // time acquire() spent copying experts to the device
  // Beside a GPU (compute/host_experts.h): expert calls (an expert over its rows in one pass)
  // computed on the host and on the device, and the host's time in its calls.
  uint64_t host_expert_calls = 0, device_expert_calls = 0;
  double host_expert_seconds = 0;
  // Wall time in the MoE blocks' routed experts (this rank's share under expert parallelism; waits
  // for their reads included; on a GPU the time to queue them), and in the exchange of their
  // outputs with the other ranks (0 for one process): ExpertSourceSlot's counters.
  double routed_expert_seconds = 0, exchange_seconds = 0;
};

class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  // The router of `layer` picked these experts: start making them resident now.
  virtual void request(int32_t layer, const int32_t* experts, int64_t n) = 0;
  // Non-blocking: is the expert resident now (so computing it will not wait)?
  virtual bool ready(int32_t layer, int32_t expert) = 0;
  // Blocks until the expert is resident and pins it until release().
  virtual const ExpertWeights& acquire(int32_t layer, int32_t expert) = 0;
  virtual void release(int32_t layer, int32_t expert) = 0;
  // A guess that these will be needed soon; may be ignored.
  virtual void prefetch(int32_t /*layer*/, const int32_t* /*experts*/, int64_t /*n*/) {}
  virtual ExpertStats stats() const = 0;
  // True when the expert's weights are in the compute device's memory now and stay there
  // (the frozen VRAM tier beside host-computed experts, compute/host_experts.h).
  virtual bool on_device(int32_t /*layer*/, int32_t /*expert*/) const { return false; }
  // The one range of host memory the source keeps experts in (its RAM cache),
  // if it has one: a GPU backend pins it so copies run at full PCIe speed.
  struct HostArena {
    void* ptr = nullptr;
    uint64_t bytes = 0;
  };
  virtual HostArena host_arena() const { return {}; }
};

// Every expert addressable in memory (views into the mapped checkpoint).
class ExpertTable : public ExpertSource {
 public:
  void set_layer(int32_t layer, std::vector<ExpertWeights> experts);
  int32_t layers() const { return int32_t(layers_.size()); }
  int32_t experts(int32_t layer) const { return int32_t(layers_[size_t(layer)].size()); }
  const ExpertWeights& at(int32_t layer, int32_t e) const { return layers_[size_t(layer)][size_t(e)]; }

  void request(int32_t, const int32_t*, int64_t) override {}
  bool ready(int32_t, int32_t) override { return true; }
  const ExpertWeights& acquire(int32_t layer, int32_t expert) override;
  void release(int32_t, int32_t) override {}
  ExpertStats stats() const override { return stats_; }

 private:
  std::vector<std::vector<ExpertWeights>> layers_;
  ExpertStats stats_;
};

// The model's current expert source, shared by its MoE blocks (swapped when
// streaming is switched on after loading).
struct ExpertSourceSlot {
  ExpertSource* source = nullptr;
  // When set, sees every MoE request (layer, the distinct experts of the pass,
  // how many of the pass's tokens picked each) before the source does: counts
  // of what the routing asked for (bench, tests).
  std::function<void(int32_t layer, const int32_t* experts, const int64_t* rows, int64_t n)> on_request;
  // Benchmark only (`sluice bench --routing-trace / --routing-synthetic`, experts/route_override.h):
  // when set, replaces the expert ids the router chose for each of a pass's T tokens (ids: T rows
  // of k) before anything is requested; the gate weights stay the router's own, slot by slot. With
  // hint set, the call is the next layer's prefetch guess (model/decoder.cpp prefetch_next) rather
  // than its routing: it returns false for no guess (then nothing is prefetched).
  std::function<bool(int32_t layer, int64_t T, int64_t k, int32_t* ids, bool hint)> override_routes;
  // Expert parallelism (compute/expert_exchange.h): the experts this rank computes; unsharded: all.
  ExpertShards shards;
  // Beside a GPU, experts the host computes (compute/host_experts.h); null: the pass's backend computes all.
  std::shared_ptr<HostExperts> host;
  // Seconds the MoE blocks spent on their routed experts and in the exchange (ExpertStats), summed.
  double routed_seconds = 0, exchange_seconds = 0;
};

// Byte ranges (pointer, length) of a weight matrix's data and scales in memory.
struct ByteRange {
  const uint8_t* ptr;
  uint64_t len;
};
std::vector<ByteRange> weight_byte_ranges(const QMatrix& m);
std::vector<ByteRange> expert_byte_ranges(const ExpertWeights& e);
uint64_t expert_bytes(const ExpertWeights& e);

}  // namespace sluice
