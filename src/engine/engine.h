// The engine boundary: a model directory opened under a plan. Everything that
// assembles the parts lives here: the checkpoint and its manifest (format/),
// the decoder built by the architecture's builder (model/), the routed-expert
// source (the tiers the plan chose, put together by experts/expert_tiers.h) and
// the spine streamer. The rest of the program sees an Engine as a Model plus
// its I/O counters and plan.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "compute/backend.h"
#include "compute/expert_source.h"
#include "engine/expert_placement.h"
#include "engine/memory_plan.h"
#include "engine/prefill_room.h"
#include "experts/streaming_experts.h"
#include "format/checkpoint.h"
#include "format/config.h"
#include "format/expert_index.h"
#include "io/spine_streamer.h"
#include "model/model.h"
#include "runtime/session.h"

namespace sluice {

class Decoder;
class LayerHooks;

// Where each part of the model lives and how it is read: what a memory plan
// resolves to (engine/memory_plan.h), or set directly by tests and tools.
struct LoadOptions {
  bool stream_experts = false;  // read routed experts on demand into a bounded cache
  StreamingOptions streaming;
  bool prefetch = false;        // predict the next layer's experts from the current hidden state
  bool use_prepared_spine = true;  // use sluice-spine.safetensors from `sluice prepare` when present
  // With streamed experts the spine is read once into private memory; layers
  // beyond this many bytes (0: no limit) are streamed layer by layer.
  uint64_t spine_budget = 0;
  Device device;  // where the forward pass computes
  // GPU: device memory sluice may use (0: what is free); routed experts are
  // kept in what the spine and state leave (plan_vram_expert_cache).
  uint64_t vram_budget = 0;
  bool vram_experts = true;  // GPU: keep routed experts in a VRAM cache (else copy them in for each use)
  // GPU: which side computes the routed experts (memory_plan.h ExpertsOn; engine/expert_placement.h).
  ExpertsOn experts_on = ExpertsOn::Gpu;
  // GPU, Auto: an expert outside the fixed VRAM set with fewer rows than this in a pass is computed on
  // the host; with more, copying it in wins (prefill chunks). 0: measured at load (expert_placement.h).
  // Above a speculative verify pass's rows per expert (--draft-max 8: at most 9), drafts and plain
  // decoding compute each expert on the same side and give the same bits.
  int64_t host_expert_rows = 0;
};

class Engine : public Model {
 public:
  ~Engine() override;

  // The model as the rest of the program uses it.
  const ModelInfo& info() const override;
  std::unique_ptr<State> new_state() const override;
  void forward(State& state, const int32_t* tokens, int64_t T, float* logits, bool all_logits,
               ForwardTrace* trace = nullptr) const override;
  void forward_batch(std::span<const SequenceFeed> feeds) const override;
  void forward_span(State& state, const int32_t* tokens, int64_t T, int64_t chunk, float* logits) const override;
  uint64_t span_bytes_per_token() const override;
  ExpertStats expert_stats() const override;
  // A new conversation with this model, prefilling in chunks of prefill_chunk()
  // (spans of prefill_span() layer by layer).
  Session session() const {
    Session s(*this);
    s.set_prefill_chunk(prefill_chunk());
    return s;
  }
  // How a long prompt goes through the model (the rule: engine/prefill_room.h). Each
  // distinct routed expert (and a streamed spine layer) is read once per layer per
  // pass, so the longer the pass the fewer times the pool is read. Chunk by chunk, a
  // pass is a chunk whose activations take three quarters of the plan's reserve (768
  // MiB's without a budget). Layer by layer (Model::forward_span), a pass is a span:
  // its rows' lasting values (the residual stream, Block AttnRes snapshots, a MoE
  // layer's routes and sum) take three quarters of that room, a chunk's activations the
  // rest, and on the CPU what the routed-expert cache lends beyond one layer's experts
  // when it cannot hold them all; used when that span is longer than the whole-room
  // chunk. prefill_span() is 0 when it is not (and under mpirun).
  int64_t prefill_chunk() const;
  int64_t prefill_span() const override;
  uint64_t activation_bytes_per_token() const;
  // The numbers that rule follows for this engine now.
  PrefillRoom prefill_room() const;
  // What the layer-by-layer passes so far held, by the engine's own accounting.
  struct SpanMemory {
    int64_t spans = 0;          // forward_span passes over more than one chunk
    int64_t longest = 0;        // tokens of the longest
    uint64_t lent_bytes = 0;    // the most the expert cache lent one of them
    // The most one held at once: its lasting rows, a chunk's activations and the expert
    // cache's slots left in use meanwhile (within the plan's expert cache and room).
    uint64_t peak_bytes = 0;
  };
  SpanMemory span_memory() const { return span_memory_; }

  const std::string& dir() const { return dir_; }
  // The decoder the engine runs (drafters that borrow its embedding and head).
  const Decoder& decoder() const { return *decoder_; }
  const Config& config() const { return config_; }
  const Checkpoint& checkpoint() const;
  const ExpertIndex& expert_index() const { return *index_; }
  Backend& backend() const { return *backend_; }
  const LoadOptions& options() const { return opts_; }
  // The memory plan the engine runs under (with the model's footprint).
  const MemoryPlan& plan() const { return plan_; }
  // What this model needs for `context_tokens` positions of state.
  ModelFootprint footprint(int64_t context_tokens) const;
  // The plan open(dir, request) runs under for this model: `request`'s budget
  // split for its context (0: 4096 positions, at most the model's context).
  MemoryPlan plan_for(const MemoryRequest& request) const;
  // Positions the model was trained for (config max_position_embeddings; 0: not stated).
  int64_t context_length() const;

  // Bytes of resident (non-routed-expert) weights the model uses, and of all routed experts.
  uint64_t spine_bytes() const;
  uint64_t routed_expert_bytes() const;
  SpineStreamStats spine_stats() const;

  // Routed experts as mapped from the checkpoint, and the source MoE blocks
  // read them through (the table itself unless another source is installed).
  ExpertTable& experts();
  ExpertSource& expert_source() const;
  // The streaming reader when routed experts are streamed (null otherwise): its per-drive counters.
  const StreamingExperts* streaming_experts() const { return streaming_; }
  void set_expert_source(std::unique_ptr<ExpertSource> source);
  void set_prefetch(bool on);
  // Called after each decoder layer of every pass (empty function: none).
  void set_layer_observer(std::function<void(int64_t layer)> f) const;
  // Sees every MoE layer's request for the distinct experts of a pass, with how many of the pass's
  // tokens picked each (empty function: none).
  void set_request_observer(
      std::function<void(int32_t layer, const int32_t* experts, const int64_t* rows, int64_t n)> f) const;
  // Beside a GPU, which side computes the routed experts, as decided at load (null on the CPU).
  const ExpertPlacement* expert_placement() const { return placement_ ? &*placement_ : nullptr; }
  // Beside a GPU, the experts the host computes (compute/host_experts.h; null: none). install() sets it
  // from expert_placement(); tests give their own.
  void set_host_experts(std::shared_ptr<HostExperts> host) const;
  // Benchmark only (bench/benchmark.cpp): replaces every MoE layer's routed expert ids
  // (compute/expert_source.h, ExpertSourceSlot::override_routes; empty function: the model's own).
  void set_route_override(std::function<bool(int32_t layer, int64_t T, int64_t k, int32_t* ids, bool hint)> f) const;

  // Opens DIR: reads config.json, maps the checkpoint, builds the decoder and
  // installs the expert source and spine streaming `opts` asks for (stream-mode
  // directories always stream their experts).
  static std::unique_ptr<Engine> open(const std::string& dir, const LoadOptions& opts = {});
  // The same under the memory plan for `request`'s budget and this model's footprint.
  static std::unique_ptr<Engine> open(const std::string& dir, const MemoryRequest& request);
  // That plan without opening the engine (maps the checkpoint, reads no weights, takes no budget).
  static MemoryPlan plan(const std::string& dir, const MemoryRequest& request);

 private:
  Engine(std::string dir, Config config, bool use_prepared_spine, Device device);
  void install(const LoadOptions& opts);
  uint64_t plan_vram(const LoadOptions& opts);
  ExpertPlacement place_experts_here(const LoadOptions& opts) const;
  std::string dir_;
  Config config_;
  LoadOptions opts_;
  MemoryPlan plan_;
  Backend* backend_ = nullptr;
  uint64_t device_spine_bytes_ = 0;  // weights this model placed in device memory
  std::optional<ExpertPlacement> placement_;  // GPU only
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<ExpertIndex> index_;
  std::unique_ptr<SpineLayout> spine_layout_;
  std::unique_ptr<SpineStreamer> spine_;
  std::unique_ptr<LayerHooks> hooks_;
  StreamingExperts* streaming_ = nullptr;  // owned by the decoder (lent from by forward_span)
  mutable SpanMemory span_memory_;
  void stream_spine(uint64_t budget);
  void shard_routed_experts(ExpertExchange& exchange);
  void agree_between_ranks();
  uint64_t owned_expert_bytes() const;
  int64_t agreed_prefill_chunk_ = 0;  // under mpirun: the smallest of the ranks' prefill chunks
  std::vector<ExpertExtent> on_demand_spine() const;
};

// Engine::open under its everyday name.
inline std::unique_ptr<Engine> load_model(const std::string& dir, const LoadOptions& opts = {}) {
  return Engine::open(dir, opts);
}

}  // namespace sluice
