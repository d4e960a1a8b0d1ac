#include "engine/engine.h"

#include <algorithm>
#include <limits>
#include <set>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "compute/devices.h"
#include "compute/host_experts.h"
#include "engine/model_identity.h"
#include "engine/unread_tensors.h"
#include "experts/expert_disk_cache.h"
#include "experts/expert_tiers.h"
#include "experts/vram_tier.h"
#include "format/generation_config.h"
#include "format/model_dir.h"
#include "model/architectures.h"
#include "model/decoder.h"
#include "util/checked_number.h"
#include "util/error.h"

namespace sluice {

namespace {
// The spine streamer behind the decoder's per-layer hooks.
class SpineHooks : public LayerHooks {
 public:
  explicit SpineHooks(SpineStreamer& s) : s_(s) {}
  void before_layer(int64_t l) override { s_.before_layer(l); }
  void after_layer(int64_t l) override { s_.after_layer(l); }

 private:
  SpineStreamer& s_;
};

// Stream mode leaves every byte that is neither spine nor routed expert a hole
// (zeros): a tensor the model reads outside both would silently be zero.
void check_stream_dir_coverage(const Decoder& d, const ExpertIndex& index) {
  const std::set<std::string> spine(index.spine().begin(), index.spine().end());
  for (const auto& name : d.weights().accessed_names())
    if (!spine.count(name) && !index.is_expert_tensor(name))
      fail("{}: the model reads '{}', which is neither spine nor a routed expert, so `sluice pull --stream` "
           "did not fetch it (internal: the expert index and the builders disagree)",
           d.checkpoint().dir(), name);
}
}  // namespace

// The backend the plan's device computes on.
static Backend& backend_for(const Device& device) { return backend_for_device(device.cuda(), device.index); }

Engine::Engine(std::string dir, Config config, bool use_prepared_spine, Device device)
    : dir_(std::move(dir)), config_(std::move(config)), backend_(&backend_for(device)) {
  const uint64_t placed_before = device_memory(*backend_).weights;
  decoder_ = build_decoder(config_, std::make_unique<Checkpoint>(dir_, use_prepared_spine), *backend_);
  device_spine_bytes_ = device_memory(*backend_).weights - placed_before;
  for (int32_t id : generation_eos_ids(dir_)) {
    auto& eos = decoder_->mutable_info().eos_ids;
    if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
  }
  index_ = std::make_unique<ExpertIndex>(config_, decoder_->checkpoint());
  if (ExpertExchange* x = expert_exchange()) shard_routed_experts(*x);
  check_no_unread_tensors(*decoder_, *index_);
  if (is_stream_dir(dir_)) check_stream_dir_coverage(*decoder_, *index_);
}

// Expert parallelism: this rank computes (and reads) only its share of each layer's routed experts.
void Engine::shard_routed_experts(ExpertExchange& exchange) {
  const ExpertTable& t = decoder_->experts();
  std::vector<std::vector<uint64_t>> bytes(size_t(t.layers()));
  for (int32_t l = 0; l < t.layers(); ++l)
    for (int32_t e = 0; e < t.experts(l); ++e) bytes[size_t(l)].push_back(expert_bytes(t.at(l, e)));
  decoder_->expert_slot()->shards = shard_experts(exchange, bytes);
}

// This rank's share of the routed experts' stored bytes (what its plan keeps resident or caches).
uint64_t Engine::owned_expert_bytes() const {
  const ExpertTable& t = decoder_->experts();
  const ExpertShards& sh = decoder_->expert_slot()->shards;
  long double owned = 0, all = 0;
  for (int32_t l = 0; l < t.layers(); ++l)
    for (int32_t e = 0; e < t.experts(l); ++e) {
      const auto b = static_cast<long double>(expert_bytes(t.at(l, e)));
      all += b;
      if (sh.owns(l, e)) owned += b;
    }
  return all > 0 ? uint64_t(static_cast<long double>(index_->total_bytes()) * owned / all) : 0;
}

Engine::~Engine() {
  if (decoder_) decoder_->set_layer_hooks(nullptr);
}

std::unique_ptr<Engine> Engine::open(const std::string& dir, const LoadOptions& opts) {
  check_model_dir(dir);
  std::unique_ptr<Engine> e(new Engine(dir, Config::load(dir), opts.use_prepared_spine, opts.device));
  // Explicit options: the plan only records what they say.
  e->plan_ = plan_memory(0, e->footprint(0), opts.device);
  e->plan_.stream_experts = opts.stream_experts;
  e->plan_.expert_cache = opts.stream_experts ? opts.streaming.cache_bytes : 0;
  e->plan_.stream_spine = opts.spine_budget > 0;
  e->plan_.spine_budget = opts.spine_budget;
  e->install(opts);
  e->agree_between_ranks();
  return e;
}

std::unique_ptr<Engine> Engine::open(const std::string& dir, const MemoryRequest& r) {
  check_memory_request(r);
  check_model_dir(dir);
  const Device device = parse_device(r.device);
  std::unique_ptr<Engine> e(new Engine(dir, Config::load(dir), /*use_prepared_spine=*/true, device));
  e->plan_ = e->plan_for(r);
  if (r.on_plan) r.on_plan(e->plan_);
  e->install(load_options(e->plan_, r, dir));
  if (r.on_placement && e->placement_) r.on_placement(*e->placement_);
  e->agree_between_ranks();
  return e;
}

MemoryPlan Engine::plan(const std::string& dir, const MemoryRequest& r) {
  check_memory_request(r);
  check_model_dir(dir);
  const Engine e(dir, Config::load(dir), /*use_prepared_spine=*/true, parse_device(r.device));
  return e.plan_for(r);
}

MemoryPlan Engine::plan_for(const MemoryRequest& r) const {
  const Device device = parse_device(r.device);
  const std::optional<uint64_t> budget =
      r.ram_gib ? std::optional<uint64_t>(checked_bytes(*r.ram_gib, double(kGiB), "--ram (GiB)")) : std::nullopt;
  // One reading of the memory available for both plans below.
  const AvailableMemory available = !budget || (r.fit_context && *budget == 0) ? available_memory() : AvailableMemory{};
  auto plan_at = [&](int64_t ctx) {
    ModelFootprint f = footprint(ctx);
    f.sequences = r.sequences;
    if (!budget) return plan_available(available, f, device);
    return plan_memory(*budget, f, device);
  };
  int64_t ctx = r.context_tokens > 0 ? r.context_tokens : 4096;
  if (context_length() > 0) ctx = std::min(ctx, context_length());
  if (r.fit_context) {
    const int64_t fits = fitting_context(plan_at(0), available, context_length());
    if (fits > 0) ctx = fits;
  }
  return plan_at(ctx);
}

ModelFootprint Engine::footprint(int64_t context_tokens) const {
  ModelFootprint f;
  f.spine_bytes = index_->spine_bytes();
  for (const auto& e : on_demand_spine()) f.spine_on_demand_bytes += e.length;
  f.spine_stream_min_bytes = SpineStreamer::min_budget(SpineLayout(decoder_->checkpoint(), index_->spine()),
                                                       decoder_->layers(), on_demand_spine());
  f.expert_bytes = index_->total_bytes();
  if (decoder_->expert_slot()->shards.sharded()) f.expert_bytes = owned_expert_bytes();
  for (int32_t l = 0; l < index_->layers(); ++l)
    for (int32_t x = 0; x < index_->experts(l); ++x) f.largest_expert_bytes = std::max(f.largest_expert_bytes, index_->bytes(l, x));
  f.state_bytes_per_token = decoder_->state_bytes_per_token();
  f.state_bytes_fixed = decoder_->state_bytes_fixed();
  f.context_tokens = context_tokens;
  f.context_max = context_length();
  return f;
}

void Engine::install(const LoadOptions& opts) {
  opts_ = opts;
  Decoder& d = *decoder_;
  ExpertSourcePlan tiers;
  tiers.stream = opts.stream_experts;
  tiers.streaming = opts.streaming;
  tiers.manifest_checksums = opts.use_prepared_spine;
  tiers.remote = is_stream_dir(dir_);  // `sluice pull --stream`: streamed, fetched on first use
  placement_.reset();
  if (opts.device.cuda()) {
    tiers.vram_bytes = plan_vram(opts);
    // After plan_vram read the free device memory: the measurement's copy leaves its buffer in the
    // stream-ordered pool (for activations), which would count as taken and shrink the VRAM cache.
    placement_ = place_experts_here(opts);
    // Every expert on the host: VRAM holds the spine only.
    if (placement_->runs == ExpertsOn::Cpu) tiers.vram_bytes = plan_.vram_expert_cache = 0;
    tiers.vram_fixed = placement_->vram_fixed();
  }
  ExpertTiers built = make_expert_source(tiers, {dir_, d.checkpoint(), *index_, d.experts(), *backend_});
  streaming_ = built.streaming;
  d.set_expert_source(std::move(built.source));
  d.expert_slot()->host = placement_ ? placement_->host_experts(cpu_backend()) : nullptr;
  d.set_prefetch(opts.prefetch);
  if (opts.stream_experts || opts.spine_budget > 0)
    stream_spine(opts.spine_budget > 0 ? opts.spine_budget : std::numeric_limits<uint64_t>::max());
}

// Auto without --host-expert-rows times this model's first routed expert (of this rank's share)
// on the host before choosing; otherwise the options alone decide.
ExpertPlacement Engine::place_experts_here(const LoadOptions& opts) const {
  if (opts.experts_on != ExpertsOn::Auto || opts.host_expert_rows > 0)
    return place_experts(opts.experts_on, opts.host_expert_rows, nullptr);
  const ExpertTable& table = decoder_->experts();
  const ExpertShards& shards = decoder_->expert_slot()->shards;
  for (int32_t l = 0; l < table.layers(); ++l)
    for (int32_t e = 0; e < table.experts(l); ++e)
      if (shards.owns(l, e) && !table.at(l, e).gate.empty()) {
        const HostExpertMeasurement m = measure_host_expert(table.at(l, e), *backend_, kHostExpertMargin);
        return place_experts(ExpertsOn::Auto, 0, &m);
      }
  return place_experts(ExpertsOn::Auto, 0, nullptr);  // no routed expert: nothing to place
}

// On a GPU, routed experts are kept in what VRAM the spine and state leave,
// in front of the host tier (the table, or the streaming reader): the plan's
// VRAM split, and the bytes of that cache (0: none).
uint64_t Engine::plan_vram(const LoadOptions& opts) {
  const ExpertTable& table = decoder_->experts();
  const uint64_t free = device_memory(*backend_).free, spine = device_spine_bytes_;
  plan_.vram_budget = opts.vram_budget > 0 ? opts.vram_budget : free + spine;
  plan_.vram_budget_given = opts.vram_budget > 0;
  plan_.vram_spine = spine;
  if (opts.vram_budget > 0 && spine > opts.vram_budget)
    fail("--vram {:.2f} GiB is less than the {:.2f} GiB of spine weights this model keeps on {} (streaming the "
         "spine from host memory on a GPU is not implemented yet)",
         double(opts.vram_budget) / double(kGiB), double(spine) / double(kGiB), opts.device.name());
  const uint64_t one = device_expert_bytes(*backend_, table);
  plan_.vram_expert_cache = opts.vram_experts ? plan_vram_expert_cache(opts.vram_budget, free, spine, plan_.state, one) : 0;
  uint64_t all = 0;  // never more than every expert
  for (int32_t l = 0; l < table.layers(); ++l) all += uint64_t(table.experts(l)) * one;
  plan_.vram_expert_cache = std::min(plan_.vram_expert_cache, all);
  return plan_.vram_expert_cache;
}

// Under a budget the embedding table stays on demand (page cache): a token
// reads one row of it. Not when it is also the head, which reads all of it.
std::vector<ExpertExtent> Engine::on_demand_spine() const {
  const Checkpoint& ck = decoder_->checkpoint();
  std::vector<ExpertExtent> on_demand;
  const std::string embed = index_->layout().prefix + "model.embed_tokens.weight";
  if (ck.has(embed) && !decoder_->head_is_embedding()) {
    TensorView t = ck.get(embed);
    on_demand.push_back({ck.file_index(embed), t.file_offset, t.nbytes()});
  }
  return on_demand;
}

void Engine::stream_spine(uint64_t budget) {
  const Checkpoint& ck = decoder_->checkpoint();
  spine_layout_ = std::make_unique<SpineLayout>(ck, index_->spine());
  spine_ = std::make_unique<SpineStreamer>(ck, *spine_layout_, decoder_->layers(), budget, on_demand_spine());
  hooks_ = std::make_unique<SpineHooks>(*spine_);
  decoder_->set_layer_hooks(hooks_.get());
}

const ModelInfo& Engine::info() const { return decoder_->info(); }
std::unique_ptr<State> Engine::new_state() const { return decoder_->new_state(); }
void Engine::forward(State& state, const int32_t* tokens, int64_t T, float* logits, bool all_logits,
                     ForwardTrace* trace) const {
  decoder_->forward(state, tokens, T, logits, all_logits, trace);
}
void Engine::forward_batch(std::span<const SequenceFeed> feeds) const { decoder_->forward_batch(feeds); }
namespace {
// Expert cache slots lent for one span, given back when it ends (or throws).
class CacheLoan {
 public:
  CacheLoan(StreamingExperts* cache, int64_t slots) : cache_(cache) {
    if (cache_ && slots > 0) bytes_ = cache_->lend(slots);
  }
  ~CacheLoan() {
    if (bytes_ == 0) return;
#if defined(__GLIBC__)
    // The span's rows are freed, but malloc may keep freed memory in its heaps (4.5 MB after a
    // 4,000-token span of a K3-shaped model): back to the system first, so the cache's pages
    // do not come back on top of it.
    malloc_trim(0);
#endif
    cache_->take_back();
  }
  CacheLoan(const CacheLoan&) = delete;
  CacheLoan& operator=(const CacheLoan&) = delete;
  uint64_t bytes() const { return bytes_; }

 private:
  StreamingExperts* cache_;
  uint64_t bytes_ = 0;
};
}  // namespace

void Engine::forward_span(State& state, const int32_t* tokens, int64_t T, int64_t chunk, float* logits) const {
  const int64_t c = chunk > 0 ? std::min(chunk, T) : T;
  if (c >= T) return decoder_->forward_span(state, tokens, T, chunk, logits);  // one chunk: no span
  const PrefillRoom room = prefill_room();
  const CacheLoan loan(streaming_, span_loan_slots(room, T, c));
  SpanMemory& m = span_memory_;
  ++m.spans;
  m.longest = std::max(m.longest, T);
  m.lent_bytes = std::max(m.lent_bytes, loan.bytes());
  const uint64_t cache = streaming_ ? uint64_t(streaming_->slots() - streaming_->lent_slots()) * streaming_->slot_bytes() : 0;
  m.peak_bytes = std::max(m.peak_bytes, uint64_t(T) * room.span_bytes + uint64_t(c) * room.activation_bytes + cache);
  decoder_->forward_span(state, tokens, T, chunk, logits);
}
uint64_t Engine::span_bytes_per_token() const { return decoder_->span_bytes_per_token(); }
ExpertStats Engine::expert_stats() const { return decoder_->expert_stats(); }

uint64_t Engine::activation_bytes_per_token() const { return decoder_->activation_bytes_per_token(); }

PrefillRoom Engine::prefill_room() const {
  PrefillRoom r;
  r.room = (plan_.reserve > 0 ? plan_.reserve : kMappedReserve) / 4 * 3;
  r.activation_bytes = activation_bytes_per_token();
  r.span_bytes = span_bytes_per_token();
  // The span's rows are host memory on the CPU; beside a GPU they are device memory (and
  // the backend pins the RAM cache), so there the cache lends nothing.
  if (streaming_ && !opts_.device.cuda()) {
    const ExpertTable& t = decoder_->experts();
    r.slot_bytes = streaming_->slot_bytes();
    r.slots = streaming_->slots();
    for (int32_t l = 0; l < t.layers(); ++l) {
      r.keep_slots = std::max<int64_t>(r.keep_slots, t.experts(l));
      r.experts += t.experts(l);
    }
  }
  return r;
}

// Under mpirun every rank must compute the same model with the same kernels
// (else they route differently and the exchange mixes up rows), and make the
// same passes, though each plans for its own host's memory: the prefill chunk
// is the smallest of the ranks'.
void Engine::agree_between_ranks() {
  ExpertExchange* x = expert_exchange();
  if (!x) return;
  // The model identity (weights, kernels) less which GPU of its host a rank uses.
  std::string id = model_identity(*this);
  if (const size_t a = id.find(' '), b = id.find(' ', a + 1); a != std::string::npos && b != std::string::npos)
    id.replace(a + 1, b - a - 1, opts_.device.cuda() ? "cuda" : "cpu");
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char c : id) h = (h ^ uint8_t(c)) * 1099511628211ull;
  const int64_t mine = int64_t(h >> 1), lo = x->agree_min(mine), hi = -x->agree_min(-mine);
  if (lo != hi)
    fail("the ranks of this mpirun job do not run the same model with the same kernels and device kind (rank {} has "
         "{} for {}): give every host the same model files, build and SLUICE_ISA",
         x->rank(), id, dir_);
  // Chunk by chunk (no spans under mpirun): the whole-reserve chunk, the smallest of the ranks'.
  PrefillRoom room = prefill_room();
  room.span_bytes = 0;
  agreed_prefill_chunk_ = x->agree_min(prefill_passes(room).chunk);
}


int64_t Engine::prefill_chunk() const {
  if (agreed_prefill_chunk_ > 0) return agreed_prefill_chunk_;
  return prefill_passes(prefill_room()).chunk;
}

int64_t Engine::prefill_span() const {
  if (agreed_prefill_chunk_ > 0) return 0;  // under mpirun: one exchange per layer per chunk, as agreed
  return prefill_passes(prefill_room()).span;
}
const Checkpoint& Engine::checkpoint() const { return decoder_->checkpoint(); }

int64_t Engine::context_length() const {
  return info().max_positions > 0 ? info().max_positions : config_.get_int("max_position_embeddings", 0);
}

uint64_t Engine::spine_bytes() const { return index_->spine_bytes(); }
uint64_t Engine::routed_expert_bytes() const { return index_->total_bytes(); }
SpineStreamStats Engine::spine_stats() const { return spine_ ? spine_->stats() : SpineStreamStats{}; }

ExpertTable& Engine::experts() { return decoder_->experts(); }
ExpertSource& Engine::expert_source() const { return decoder_->expert_source(); }
void Engine::set_expert_source(std::unique_ptr<ExpertSource> source) {
  streaming_ = nullptr;  // the streaming reader, if it was the source, goes with it
  decoder_->set_expert_source(std::move(source));
}
void Engine::set_prefetch(bool on) { decoder_->set_prefetch(on); }
void Engine::set_layer_observer(std::function<void(int64_t)> f) const { decoder_->set_layer_observer(std::move(f)); }
void Engine::set_request_observer(std::function<void(int32_t, const int32_t*, const int64_t*, int64_t)> f) const {
  decoder_->expert_slot()->on_request = std::move(f);
}
void Engine::set_host_experts(std::shared_ptr<HostExperts> host) const { decoder_->expert_slot()->host = std::move(host); }
void Engine::set_route_override(std::function<bool(int32_t, int64_t, int64_t, int32_t*, bool)> f) const {
  decoder_->expert_slot()->override_routes = std::move(f);
}

}  // namespace sluice
