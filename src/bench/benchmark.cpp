#include "bench/benchmark.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "compute/expert_exchange.h"
#include "engine/drafter.h"
#include "engine/engine.h"
#include "engine/route_recorder.h"
#include "experts/route_override.h"
#include "experts/routing_stats.h"
#include "runtime/retokenizing_drafter.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "runtime/suffix_drafter.h"
#include "util/error.h"
#include "util/process_stats.h"
#include "util/progress.h"
#include "util/trace.h"

namespace sluice {

namespace {

using Clock = std::chrono::steady_clock;
using Progress_fn = std::function<void(const std::string&)>;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
// Seconds the model has waited for expert and spine reads so far (a difference of two is a stall).
double read_wait_seconds(const Engine& m) { return m.expert_stats().stall_seconds + m.spine_stats().stall_seconds; }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// The nearest-rank q-quantile (0 < q <= 1): the smallest value with at least q of them at or below it.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = size_t(std::ceil(q * double(v.size())));
  return v[std::min(v.size(), std::max<size_t>(rank, 1)) - 1];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

// Progress lines at most every two seconds, and the last one always.
class Ticker {
 public:
  explicit Ticker(const Progress_fn& f) : f_(f) {}
  void say(const std::string& line, bool force = false) {
    if (!f_) return;
    if (!force && seconds_since(last_) < 2.0) return;
    last_ = Clock::now();
    f_(line);
  }

 private:
  const Progress_fn& f_;
  Clock::time_point last_ = Clock::now() - std::chrono::hours(1);
};

// The bytes of the distinct experts the routing asked for, per layer, summed
// (what reading each routed expert once costs), while this is alive.
class RoutedExperts {
 public:
  explicit RoutedExperts(Engine& e) : e_(e) {
    e_.set_request_observer([this](int32_t layer, const int32_t* x, const int64_t*, int64_t n) {
      for (int64_t i = 0; i < n; ++i) seen_.insert({layer, x[i]});
    });
  }
  ~RoutedExperts() { e_.set_request_observer({}); }
  RoutedExperts(const RoutedExperts&) = delete;
  RoutedExperts& operator=(const RoutedExperts&) = delete;
  uint64_t distinct_bytes() const {
    uint64_t b = 0;
    for (const auto& [l, x] : seen_) b += e_.expert_index().bytes(l, x);
    return b;
  }
  void clear() { seen_.clear(); }

 private:
  Engine& e_;
  std::set<std::pair<int32_t, int32_t>> seen_;
};

// The benchmark-only routing override the request asks for, installed while this is alive (none
// asked for: nothing installed, label() empty).
class RoutingOverride {
 public:
  RoutingOverride(Engine& e, const BenchRequest& r) : e_(e) {
    if (r.routing_trace.empty() && r.routing_synthetic.empty()) return;
    const std::vector<int32_t> experts = e_.expert_index().experts_per_layer();
    if (!r.routing_trace.empty()) {
      src_ = routing_trace(r.routing_trace, experts);
    } else {
      SyntheticRoutingSpec spec = parse_synthetic_routing(r.routing_synthetic);
      spec.calibration_tokens = r.tokens;  // next_layer as the statistic over this decode will measure it
      src_ = synthetic_routing(spec, experts);
    }
    RouteOverride* s = src_.get();
    e_.set_route_override([s](int32_t layer, int64_t T, int64_t k, int32_t* ids, bool hint) {
      if (hint) return s->hint(layer, T, k, ids);
      s->route(layer, T, k, ids);
      return true;
    });
  }
  ~RoutingOverride() {
    if (src_) e_.set_route_override({});
  }
  RoutingOverride(const RoutingOverride&) = delete;
  RoutingOverride& operator=(const RoutingOverride&) = delete;
  nlohmann::json json() const { return src_ ? nlohmann::json(src_->describe()) : nlohmann::json(nullptr); }
  std::string label() const {
    return src_ ? fmt::format("routing: benchmark-only override ({}): the model's own routing is not used; tokens are "
                              "not the model's",
                              src_->describe())
                : std::string();
  }

 private:
  Engine& e_;
  std::unique_ptr<RouteOverride> src_;
};

std::string routing_summary(const RoutingStats& s) {
  return fmt::format(
      "routing over {} decoded tokens x {} MoE layers: previous-token overlap {:.1f}%, hottest 30% of experts {:.1f}% "
      "of picks, {:.1f} distinct experts per {} tokens, next layer predictable {:.1f}%",
      s.tokens, s.layers, 100 * s.prev_token_overlap, 100 * s.hottest_30pct_share, s.distinct_per_100_tokens,
      s.window_tokens, 100 * s.next_layer_predictable);
}

// What each drive served between two snapshots of the reader's counters, over
// `seconds` of the measured phase: `gbps` is its share of the phase's read
// rate, `busy_gbps` its rate while it had reads in flight.
nlohmann::json drives_json(const std::vector<DriveStats>& before, const std::vector<DriveStats>& after, double seconds) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < after.size(); ++i) {
    const DriveStats b = i < before.size() ? before[i] : DriveStats{};
    const uint64_t bytes = after[i].bytes_read - b.bytes_read;
    const double busy = after[i].busy_seconds - b.busy_seconds;
    out.push_back({{"dir", after[i].dir}, {"bytes", bytes}, {"reads", after[i].reads - b.reads},
                   {"gbps", seconds > 0 ? double(bytes) / seconds / 1e9 : 0.0}, {"busy_seconds", busy},
                   {"busy_gbps", busy > 0 ? double(bytes) / busy / 1e9 : 0.0}});
  }
  return out;
}

// One line naming each drive's share, when more than one served reads.
std::string drives_summary(const nlohmann::json& drives) {
  std::string s;
  int served = 0;
  for (const auto& d : drives) {
    if (d["bytes"].get<uint64_t>() == 0) continue;
    ++served;
    s += fmt::format(" {} {} ({:.3f} GB/s)", d["dir"].get<std::string>(), human_bytes(d["bytes"].get<double>()),
                     d["gbps"].get<double>());
  }
  return served < 2 ? "" : fmt::format("{} drives:{}", served, s);
}

// For each token and MoE layer, top-k uniformly random distinct experts
// (sorted), in decode order.
std::vector<std::pair<int32_t, std::vector<int32_t>>> random_routes(const ExpertTable& table, int64_t k, int64_t tokens,
                                                                    uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<int32_t, std::vector<int32_t>>> steps;
  for (int64_t t = 0; t < tokens; ++t)
    for (int32_t l = 0; l < table.layers(); ++l) {
      if (table.experts(l) == 0) continue;
      std::vector<int32_t> ids;
      while (int64_t(ids.size()) < std::min<int64_t>(k, table.experts(l))) {
        int32_t e = int32_t(rng() % uint64_t(table.experts(l)));
        if (std::find(ids.begin(), ids.end(), e) == ids.end()) ids.push_back(e);
      }
      std::sort(ids.begin(), ids.end());
      steps.push_back({l, ids});
    }
  return steps;
}

// Each step's experts are requested, the next step's are prefetched (as a
// perfect predictor would), then the step's experts are consumed; stops
// after `max_seconds` (0: never). Returns the steps done.
size_t read_steps(StreamingExperts& src, const std::vector<std::pair<int32_t, std::vector<int32_t>>>& steps,
                  double max_seconds, const std::function<void(size_t)>& on_step) {
  const auto t0 = Clock::now();
  size_t i = 0;
  for (; i < steps.size(); ++i) {
    const auto& [l, ids] = steps[i];
    src.request(l, ids.data(), int64_t(ids.size()));
    if (i + 1 < steps.size()) src.prefetch(steps[i + 1].first, steps[i + 1].second.data(), int64_t(steps[i + 1].second.size()));
    for (int32_t e : ids) {
      src.acquire(l, e);
      src.release(l, e);
    }
    if (on_step) on_step(i);
    if (max_seconds > 0 && seconds_since(t0) >= max_seconds) return i + 1;
  }
  return i;
}

// The drive's rate on the model's own expert extents: the expert reader
// alone (same files, O_DIRECT, queue and read size as the decode), random
// top-k experts per layer with the next step's in flight, no verification
// and a cache too small to hit, for about `seconds`. Bytes per second, 0
// when the model streams nothing from local files.
double probe_drive_bps(const BenchRequest& r, double seconds) {
  auto engine = Engine::open(r.model);
  const MemoryPlan plan = engine->plan_for(r.mem);
  StreamingOptions so = load_options(plan, r.mem, r.model).streaming;
  if (so.fetcher) return 0;  // stream mode: would download
  so.checksums.clear();
  so.prefault = false;  // the probe never touches the bytes it reads
  so.policy = "lru";
  so.heat_file.clear();
  const ExpertTable& table = engine->experts();
  const int64_t k = engine->expert_index().layout().top_k;
  uint64_t largest = 0;
  for (int32_t l = 0; l < table.layers(); ++l)
    for (int32_t e = 0; e < table.experts(l); ++e) largest = std::max(largest, engine->expert_index().bytes(l, e));
  if (largest == 0) return 0;
  // Room for one step and the next in flight (plus alignment padding): nearly every read misses.
  so.cache_bytes = uint64_t(2 * k + 2) * (largest + 2 * kDirectAlign * 8);
  StreamingExperts src(table, engine->checkpoint(), so);
  const auto steps = random_routes(table, k, 4096, r.seed + 7919);
  const auto t0 = Clock::now();
  read_steps(src, steps, seconds, {});
  const double secs = seconds_since(t0);
  return secs > 0 ? double(src.stats().bytes_read) / secs : 0;
}

// Reads only: for each token and MoE layer, top-k uniformly random experts are
// requested and acquired through the same reader and cache, with no compute,
// the next step's experts prefetched while the current ones are consumed.
// This is the reader's raw throughput on the model's real expert extents.
BenchResult io_only(const BenchRequest& r, Ticker& tick) {
  auto engine = Engine::open(r.model);
  const MemoryPlan plan = engine->plan_for(r.mem);
  const StreamingOptions so = load_options(plan, r.mem, r.model).streaming;
  const ExpertTable& table = engine->experts();
  StreamingExperts src(table, engine->checkpoint(), so);
  const int64_t k = engine->expert_index().layout().top_k;
  const auto steps = random_routes(table, k, r.tokens, r.seed);
  const auto t0 = Clock::now();
  read_steps(src, steps, 0, [&](size_t i) {
    tick.say(fmt::format("bench: io-only step {} of {}, {} read", i + 1, steps.size(),
                         human_bytes(double(src.stats().bytes_read))));
  });
  const double secs = seconds_since(t0);
  ExpertStats st = src.stats();
  const nlohmann::json drives = drives_json({}, src.drive_stats(), secs);
  BenchResult res;
  res.json = {{"model", r.model}, {"io_only", true}, {"tokens", r.tokens}, {"experts_per_layer", k},
              {"reader", src.queue_name()}, {"direct_io", src.direct_io()}, {"queue_depth", so.queue_depth},
              {"read_chunk_bytes", so.chunk_bytes}, {"cache_bytes", src.cache_bytes()},
              {"expert_bytes_read", st.bytes_read}, {"seconds", secs},
              {"read_gbps", double(st.bytes_read) / secs / 1e9},
              {"cache_hit_rate", st.hits + st.misses ? double(st.hits) / double(st.hits + st.misses) : 0.0},
              {"drives", drives}};
  res.summary.push_back(fmt::format(
      "{}: io-only {} read in {:.2f} s = {:.2f} GB/s ({}, {}, queue depth {}, {} KiB reads, hit rate {:.1f}%)", r.model,
      human_bytes(double(st.bytes_read)), secs, res.json["read_gbps"].get<double>(), src.queue_name(),
      src.direct_io() ? "O_DIRECT" : "buffered", so.queue_depth, so.chunk_bytes / 1024,
      100 * res.json["cache_hit_rate"].get<double>()));
  if (!drives_summary(drives).empty()) res.summary.push_back(drives_summary(drives));
  return res;
}

// The prompt: the given ids or random ones, repeated as asked.
std::vector<int32_t> make_prompt(const BenchRequest& r, int64_t vocab) {
  std::vector<int32_t> prompt = r.prompt;
  for (int32_t id : prompt)
    if (id < 0 || id >= vocab) fail("bench: prompt token {} is outside the model's vocabulary ({})", id, vocab);
  if (prompt.empty()) {
    std::mt19937_64 rng(r.seed);
    prompt.resize(static_cast<size_t>(r.prompt_tokens));
    for (auto& t : prompt) t = int32_t(rng() % uint64_t(vocab));
  }
  const std::vector<int32_t> once = prompt;
  for (int64_t i = 1; i < r.repeat_prompt; ++i) prompt.insert(prompt.end(), once.begin(), once.end());
  return prompt;
}

// Greedy generation of r.tokens tokens, plain or speculative, through the same
// decoding loop; means per generated token. Counters start when the first token
// is out, i.e. after the prompt's prefill. `text` receives prompt + output.
nlohmann::json measure_generation(const BenchRequest& r, const Engine& model, const std::vector<int32_t>& prompt,
                                  Drafter* drafter, const char* label, Ticker& tick, std::vector<std::string>& summary,
                                  std::vector<int32_t>* text = nullptr) {
  Session g = model.session();
  if (r.chunk > 0) g.set_prefill_chunk(r.chunk);
  if (r.span >= 0) g.set_prefill_span(r.span);
  SpeculationOptions so;
  so.max_draft = r.draft_max;
  so.adaptive = !r.no_draft_gate;
  SpeculationStats st;
  ExpertStats e0;
  uint64_t io0 = 0;
  Clock::time_point t_first;
  const auto t0 = Clock::now();
  double prefill = 0;
  const int64_t V = model.info().vocab;
  auto greedy = [V](float* logits) { return argmax(logits, V); };
  tick.say(fmt::format("bench: {}: prefilling {} tokens", label, prompt.size()), true);
  std::vector<int32_t> out = generate(g, prompt, r.tokens + 1, true, greedy, drafter, so, &st, [&](int32_t) {
    if (st.generated == 1) {
      t_first = Clock::now();
      prefill = std::chrono::duration<double>(t_first - t0).count();
      e0 = model.expert_stats();
      io0 = process_read_bytes();
    }
    tick.say(fmt::format("bench: {}: {} of {} tokens generated", label, st.generated, r.tokens + 1));
  });
  const double gen = seconds_since(t_first);
  const ExpertStats e1 = model.expert_stats();
  const double n = double(std::max<int64_t>(1, st.generated - 1));
  if (text) {
    *text = prompt;
    text->insert(text->end(), out.begin(), out.end());
  }
  nlohmann::json j = {{"model", r.model}, {"mode", label}, {"draft_max", r.draft_max},
                      {"prompt_tokens", prompt.size()}, {"tokens", st.generated - 1}, {"prefill_seconds", prefill},
                      {"seconds_per_token", gen / n}, {"verify_passes", st.passes},
                      {"forward_passes", st.forward_passes()}, {"proposed", st.proposed},
                      {"accepted", st.accepted}, {"acceptance", st.acceptance()},
                      {"expert_bytes_read_per_token", double(e1.bytes_read - e0.bytes_read) / n},
                      {"expert_bytes_needed_per_token", double(e1.bytes_needed - e0.bytes_needed) / n},
                      {"storage_bytes_read", process_read_bytes() - io0}, {"peak_rss_bytes", process_peak_rss()}};
  if (drafter) {
    nlohmann::json costs = nlohmann::json::array();  // [k - 1]: a pass of k drafts in plain steps (null: not drafted)
    for (size_t k = 1; k < st.gate_pass_cost.size(); ++k)
      costs.push_back(st.gate_pass_cost[k] > 0 ? nlohmann::json(st.gate_pass_cost[k]) : nlohmann::json());
    j["gate"] = {{"used", st.gate_used}, {"on_at_end", st.gate_on}, {"acceptance", st.gate_acceptance},
                 {"draft_cost", st.gate_draft_cost}, {"pass_cost_by_k", costs}, {"off_steps", st.off_steps},
                 {"probes", st.probes}, {"watched_drafts", st.watched}, {"watched_accepted", st.watched_accepted},
                 {"last_pause", st.gate_pause}, {"seconds", st.gate_seconds},
                 {"share_of_generation", gen > 0 ? st.gate_seconds / gen : 0.0}};
  }
  summary.push_back(fmt::format(
      "{}: {} {:.4f} s/token over {} tokens ({} forward passes, acceptance {:.1f}%), prefill {:.2f} s for {} tokens, "
      "experts read {}/token (needed {}/token), peak RSS {}",
      r.model, label, gen / n, st.generated - 1, st.forward_passes(), 100 * st.acceptance(), prefill, prompt.size(),
      human_bytes(j["expert_bytes_read_per_token"].get<double>()),
      human_bytes(j["expert_bytes_needed_per_token"].get<double>()), human_bytes(double(process_peak_rss()))));
  if (drafter) summary.back() += "\n  " + describe_speculation(st);
  return j;
}

bool replaying(const BenchRequest& r) { return r.replay_wrong_every >= 0 || r.replay_acceptance >= 0; }

// --generate, --speculate, or --replay-drafts (a plain run, then speculation
// with its own tokens as drafts, each on a freshly opened model so both start
// with a cold expert cache).
BenchResult generation(const BenchRequest& r, Ticker& tick) {
  BenchResult res;
  auto first = Engine::open(r.model, r.mem);
  const std::string plan = first->plan().describe();
  const std::vector<int32_t> prompt = make_prompt(r, first->info().vocab);
  if (!r.draft_model.empty()) {
    nlohmann::json plain = measure_generation(r, *first, prompt, nullptr, "plain", tick, res.summary);
    first.reset();
    auto model = Engine::open(r.model, r.mem);
    DraftChoice c;
    c.model_dir = r.draft_model;
    c.retokenize = r.draft_retokenize;
    const std::shared_ptr<Drafter> d = choose_drafter(c, *model, r.model);
    const bool text = std::dynamic_pointer_cast<RetokenizingDrafter>(d) != nullptr;
    // The draft model reads the prompt (and its weights are paged in) before the timing starts, as the
    // target's prefill is not timed either; its first draft then continues from the prompt.
    d->propose(prompt, 1);
    nlohmann::json spec = measure_generation(r, *model, prompt, d.get(),
                                             text ? "draft-model-through-text" : "draft-model", tick, res.summary);
    const double tp = plain["seconds_per_token"].get<double>(), ts = spec["seconds_per_token"].get<double>();
    res.summary.push_back(fmt::format("draft model {} ({}): {:.2f} tokens/s against {:.2f} plain ({:.2f}x)",
                                      r.draft_model,
                                      !text                ? "same tokenizer"
                                      : r.draft_retokenize ? "drafts through text: --draft-retokenize"
                                                           : "another tokenizer: drafts through text",
                                      1 / ts, 1 / tp, tp / ts));
    spec["draft_model"] = r.draft_model;
    spec["through_text"] = text;
    res.json = {{"plain", plain}, {"speculative", spec}, {"time_ratio", ts / tp}};
  } else if (replaying(r)) {
    std::vector<int32_t> text;
    nlohmann::json plain = measure_generation(r, *first, prompt, nullptr, "plain", tick, res.summary, &text);
    first.reset();
    auto model = Engine::open(r.model, r.mem);
    ReplayDrafter d = r.replay_acceptance >= 0
                          ? ReplayDrafter::with_acceptance(text, r.replay_acceptance, r.seed, model->info().vocab)
                          : ReplayDrafter(text, r.replay_wrong_every, model->info().vocab);
    nlohmann::json spec = measure_generation(r, *model, prompt, &d, "replayed-drafts", tick, res.summary);
    const double t = spec["seconds_per_token"].get<double>() / plain["seconds_per_token"].get<double>();
    const double b = spec["expert_bytes_read_per_token"].get<double>() /
                     std::max(1.0, plain["expert_bytes_read_per_token"].get<double>());
    res.summary.push_back(fmt::format("speculative / plain: {:.2f}x time per token, {:.2f}x expert bytes read per token", t, b));
    res.json = {{"plain", plain}, {"speculative", spec}, {"time_ratio", t}, {"expert_read_ratio", b}};
  } else {
    NgramDrafter ngram;
    SuffixDrafter suffix;
    Drafter* drafter = !r.speculate ? nullptr : r.draft == "suffix" ? static_cast<Drafter*>(&suffix) : &ngram;
    res.json = measure_generation(r, *first, prompt, drafter, r.speculate ? "speculative" : "plain", tick, res.summary);
    if (r.speculate) res.json["draft"] = r.draft;
  }
  res.json["plan"] = plan;
  return res;
}

// The layer-by-layer passes of a prefill (Engine::span_memory since `before`) and the rule
// that sized them (engine/prefill_room.h): how many, the longest, what the expert cache
// lent one at most, and the most one held with the cache.
nlohmann::json prefill_span_json(const Engine& m, const Engine::SpanMemory& before) {
  const Engine::SpanMemory now = m.span_memory();
  const PrefillRoom room = m.prefill_room();
  return {{"count", now.spans - before.spans},
          {"longest_tokens", now.longest},
          {"cache_lent_bytes", now.lent_bytes},
          {"peak_bytes", now.peak_bytes},
          {"room_bytes", room.room},
          {"span_bytes_per_token", room.span_bytes},
          {"activation_bytes_per_token", room.activation_bytes},
          {"lendable_bytes", uint64_t(lendable_slots(room)) * room.slot_bytes},
          {"cache_keeps_slots", room.keep_slots}};
}

// The prompt's prefill as decode() measures it.
struct PrefillMeasure {
  double seconds = 0, stall = 0, verify = 0;  // wall time, waits for expert and spine reads, checksums
  uint64_t read = 0, copied = 0, distinct = 0;  // expert bytes read, copied to a GPU, of the distinct routed experts
  nlohmann::json spans;                         // prefill_span_json
};

// Feeds the prompt to `s`, timed; returns the last position's logits (the session's).
const std::vector<float>* time_prefill(Engine& model, Session& s, const std::vector<int32_t>& prompt, Ticker& tick,
                                       PrefillMeasure& pm) {
  tick.say(fmt::format("bench: prefilling {} tokens", prompt.size()), true);
  const ExpertStats before = model.expert_stats();
  const Engine::SpanMemory spans0 = model.span_memory();
  const double wait0 = read_wait_seconds(model);
  auto routed = std::make_unique<RoutedExperts>(model);
  auto t0 = Clock::now();
  const std::vector<float>* lg = &s.feed(prompt);
  pm.seconds = seconds_since(t0);
  // Time the prefill waited for expert and spine reads; the rest is compute.
  pm.stall = read_wait_seconds(model) - wait0;
  pm.spans = prefill_span_json(model, spans0);
  pm.distinct = routed->distinct_bytes();
  const ExpertStats after = model.expert_stats();
  pm.read = after.bytes_read - before.bytes_read;
  pm.copied = after.device_bytes_copied - before.device_bytes_copied;
  pm.verify = after.verify_seconds - before.verify_seconds;
  return lg;
}

// The decode steps' measurements, token by token.
struct DecodeSteps {
  nlohmann::json per_token = nlohmann::json::array();
  std::vector<double> secs, ebytes, sbytes, need, dbytes;
  double copy_total = 0;
  uint64_t host_calls = 0, device_calls = 0;  // expert calls on the host / the GPU (compute/host_experts.h)
  double host_expert_s = 0;
  double decode_total = 0, stall_total = 0, verify_total = 0;
  uint64_t read_total = 0, landed_while_stalled = 0;

  // One step of `dt` seconds that took the expert stats from `prev` to `st` while the
  // process read `io` bytes from storage (the experts' and the spine's).
  void add(double dt, const ExpertStats& prev, const ExpertStats& st, uint64_t io) {
    const uint64_t er = st.bytes_read - prev.bytes_read;
    const uint64_t sr = io > er ? io - er : 0;
    const uint64_t nd = st.bytes_needed - prev.bytes_needed;
    const double stall = st.stall_seconds - prev.stall_seconds;
    per_token.push_back({{"seconds", dt}, {"expert_bytes_read", er}, {"spine_bytes_read", sr},
                         {"expert_bytes_needed", nd}, {"stall_seconds", stall},
                         {"verify_seconds", st.verify_seconds - prev.verify_seconds},
                         {"cache_hits", st.hits - prev.hits}, {"cache_misses", st.misses - prev.misses},
                         {"device_bytes_copied", st.device_bytes_copied - prev.device_bytes_copied},
                         {"device_copy_seconds", st.device_copy_seconds - prev.device_copy_seconds},
                         {"device_hits", st.device_hits - prev.device_hits},
                         {"host_expert_calls", st.host_expert_calls - prev.host_expert_calls},
                         {"device_expert_calls", st.device_expert_calls - prev.device_expert_calls}});
    host_calls += st.host_expert_calls - prev.host_expert_calls;
    device_calls += st.device_expert_calls - prev.device_expert_calls;
    host_expert_s += st.host_expert_seconds - prev.host_expert_seconds;
    dbytes.push_back(double(st.device_bytes_copied - prev.device_bytes_copied));
    copy_total += st.device_copy_seconds - prev.device_copy_seconds;
    secs.push_back(dt);
    ebytes.push_back(double(er));
    sbytes.push_back(double(sr));
    need.push_back(double(nd));
    decode_total += dt;
    stall_total += stall;
    verify_total += st.verify_seconds - prev.verify_seconds;
    read_total += er;
    landed_while_stalled += st.bytes_landed_while_stalled - prev.bytes_landed_while_stalled;
  }
};

// r.tokens greedy steps after the logits `lg`, each timed with its I/O (traced when asked).
DecodeSteps time_decode(const Engine& model, Session& s, const std::vector<float>* lg, const BenchRequest& r,
                        Ticker& tick) {
  DecodeSteps d;
  ExpertStats prev = model.expert_stats();
  uint64_t io_prev = process_read_bytes();
  if (!r.trace.empty()) trace::start(r.trace);
  for (int64_t i = 0; i < r.tokens; ++i) {
    const int32_t next = argmax(lg->data(), int64_t(lg->size()));
    auto a = Clock::now();
    lg = &s.feed({next});
    const double dt = seconds_since(a);
    if (trace::enabled()) trace::span(fmt::format("token {}", i), "token", a, Clock::now());
    const ExpertStats st = model.expert_stats();
    const uint64_t io = process_read_bytes();
    d.add(dt, prev, st, io - io_prev);
    prev = st;
    io_prev = io;
    tick.say(fmt::format("bench: decoded {} of {} tokens ({:.3f} s/token)", i + 1, r.tokens, d.decode_total / double(i + 1)),
             i + 1 == r.tokens);
  }
  trace::stop();
  return d;
}

// The next-layer guess per layer over the decode (from g0 to g1): experts guessed that the
// cache lacked, how many the router then chose, how many were read; `line` gets the summary.
nlohmann::json prefetch_guesses(const std::vector<LayerPrefetchStats>& g0, const std::vector<LayerPrefetchStats>& g1,
                                std::string& line) {
  nlohmann::json guesses = nlohmann::json::array();
  for (size_t l = 0; l < g1.size() && l < g0.size(); ++l) {
    LayerPrefetchStats d;
    d.guessed = g1[l].guessed - g0[l].guessed;
    d.right = g1[l].right - g0[l].right;
    d.issued = g1[l].issued - g0[l].issued;
    d.skipped = g1[l].skipped - g0[l].skipped;
    d.cancelled = g1[l].cancelled - g0[l].cancelled;
    if (d.guessed == 0 && d.issued == 0) continue;
    guesses.push_back({{"layer", l}, {"guessed", d.guessed}, {"right", d.right}, {"precision", d.precision()},
                       {"issued", d.issued}, {"skipped", d.skipped}, {"dropped", d.cancelled}});
    line += fmt::format("{}L{} {:.0f}% of {} ({} read)", line.empty() ? "" : ", ", l, 100 * d.precision(), d.guessed,
                        d.issued);
  }
  return guesses;
}

// The floor of a decode: the bytes it read per token at the drive's rate (`drive_bps`, probed
// before the decode on the model's files; 0: not probed), plus the compute that did not wait; into res.json,
// and the summary's reads-while-stalled part.
std::string decode_floor(double drive_bps, const BenchRequest& r, double bytes_per_token, double compute_s,
                         double mean_s, BenchResult& res) {
  const double io_floor = drive_bps > 0 ? bytes_per_token / drive_bps : 0;
  const double stalled_gbps = res.json["read_gbps_while_stalled"].get<double>();
  res.json["drive_gbps"] = drive_bps / 1e9;
  res.json["drive_probe_seconds"] = r.probe_seconds;
  res.json["stalled_read_vs_drive"] = drive_bps > 0 ? stalled_gbps * 1e9 / drive_bps : 0;
  res.json["io_floor_seconds_per_token"] = io_floor;
  res.json["floor_seconds_per_token"] = io_floor + compute_s;
  res.json["floor_ratio"] = drive_bps > 0 && io_floor + compute_s > 0 ? mean_s / (io_floor + compute_s) : 0;
  const std::string stalled_part = stalled_gbps > 0 ? fmt::format("{:.2f} GB/s", stalled_gbps) : "none (no stall)";
  return drive_bps > 0 ? fmt::format("{} = {:.2f}x the drive's {:.2f} GB/s (probe); floor {:.4f} s/token (I/O "
                                     "{:.4f} + compute {:.4f}), {:.2f}x the floor",
                                     stalled_part, res.json["stalled_read_vs_drive"].get<double>(), drive_bps / 1e9,
                                     io_floor + compute_s, io_floor, compute_s, res.json["floor_ratio"].get<double>())
                       : fmt::format("{} (drive not probed)", stalled_part);
}

// Beside a GPU, the summary line of the decode's copies and where the experts were computed.
std::string decode_gpu_line(const BenchRequest& r, const std::string& device, const std::optional<ExpertPlacement>& placed,
                            const DecodeSteps& d, const BenchResult& res) {
  const double n = double(r.tokens);
  return fmt::format("{}: {:.2f} tokens/s decode (mean), {:.1f} tokens/s prefill; experts copied to the GPU {}/token "
                     "(mean), copies {:.0f}% of decode time",
                     device, res.json["tokens_per_second"].get<double>(),
                     res.json["prefill_tokens_per_second"].get<double>(), human_bytes(mean(d.dbytes)),
                     100 * res.json["device_copy_fraction"].get<double>()) +
         (!placed || placed->runs == ExpertsOn::Gpu
              ? fmt::format("; every expert computed on the GPU (--experts-on {}{})", r.mem.experts_on,
                            r.mem.experts_on == "gpu" ? "" : ": gpu chosen")
              : fmt::format("; experts computed per token: {:.1f} on the host ({:.2f} ms of host time), {:.1f} on the "
                            "GPU (--experts-on {})",
                            double(d.host_calls) / n, 1e3 * d.host_expert_s / n, double(d.device_calls) / n,
                            r.mem.experts_on));
}

// What a user waiting for the tokens gets: the decode's wall time over the tokens
// (the mean), then the bytes and the compute behind it.
struct DecodeTotals {
  double n = 0, mean_s = 0, bytes_per_token = 0, compute_s = 0, hit_rate = 0, ready_rate = 0, recall = 0;
};
DecodeTotals decode_totals(const BenchRequest& r, const DecodeSteps& d, const ExpertStats& st) {
  DecodeTotals t;
  t.n = double(r.tokens);
  t.mean_s = d.decode_total / t.n;
  std::vector<double> all_bytes(d.secs.size());
  for (size_t i = 0; i < d.secs.size(); ++i) all_bytes[i] = d.ebytes[i] + d.sbytes[i];
  t.bytes_per_token = mean(all_bytes);
  t.compute_s = (d.decode_total - d.stall_total) / t.n;
  t.hit_rate = st.hits + st.misses ? double(st.hits) / double(st.hits + st.misses) : 0;
  t.ready_rate = st.hits + st.misses ? double(st.ready_hits) / double(st.hits + st.misses) : 0;
  t.recall = st.requests ? double(st.prefetch_used) / double(st.requests) : 0;
  return t;
}

// The decode's JSON (bench_decode's fields; README "Run the main job" says what they mean).
struct DecodeRun {
  const BenchRequest& r;
  const Engine& model;
  const Session& session;
  size_t prompt_tokens;
  const PrefillMeasure& prefill;
  const DecodeSteps& steps;
  const ExpertStats& stats;  // after the decode
  const DecodeTotals& totals;
  const nlohmann::json& drives;
  const nlohmann::json& guesses;
  const std::optional<ExpertPlacement>& placed;
  uint64_t io0;  // process_read_bytes() before the prefill
};
nlohmann::json decode_json(const DecodeRun& run) {
  const BenchRequest& r = run.r;
  const Engine& model = run.model;
  const MemoryPlan& plan = model.plan();
  const DecodeSteps& d = run.steps;
  const PrefillMeasure& pm = run.prefill;
  const ExpertStats& st = run.stats;
  const DecodeTotals& t = run.totals;
  const SpineStreamStats sp = model.spine_stats();
  const StreamingExperts* reader = model.streaming_experts();
  const double total = d.decode_total;
  return {
      {"model", r.model},
      {"tokens_per_second", total > 0 ? t.n / total : 0},
      {"seconds_per_token", t.mean_s},
      {"seconds_per_token_median", median(d.secs)},
      {"seconds_per_token_p90", quantile(d.secs, 0.9)},
      {"seconds_per_token_max", quantile(d.secs, 1.0)},
      {"tokens_per_second_median", median(d.secs) > 0 ? 1.0 / median(d.secs) : 0},
      {"decode_seconds", total},
      {"ram_bytes", plan.budget},
      {"plan", plan.describe()},
      {"memory_plan", plan.to_json()},
      {"spine_bytes", model.spine_bytes()},
      {"routed_expert_bytes", model.routed_expert_bytes()},
      {"cache_bytes", model.options().streaming.cache_bytes},
      {"spine_budget_bytes", model.options().spine_budget},
      {"spine_resident_layers", sp.resident_layers},
      {"spine_streamed_layers", sp.streamed_layers},
      {"spine_stream_bytes_read", sp.bytes_read},
      {"spine_stall_seconds", sp.stall_seconds},
      {"policy", r.mem.policy},
      {"prefetch", !r.mem.no_prefetch},
      {"cache_prefault", !r.mem.no_prefault},
      {"cache_prefault_seconds", reader ? reader->prefault_seconds() : 0.0},
      {"cache_prefault_done", reader ? reader->prefault_done() : false},
      {"tokens", r.tokens},
      {"prompt_tokens", run.prompt_tokens},
      {"prefill_seconds", pm.seconds},
      {"prefill_stall_seconds", pm.stall},
      {"prefill_chunk", run.session.prefill_chunk()},
      {"prefill_span", run.session.prefill_span()},
      {"prefill_spans", pm.spans},
      {"prefill_expert_bytes_read", pm.read},
      {"prefill_device_bytes_copied", pm.copied},
      {"prefill_distinct_expert_bytes", pm.distinct},
      {"bytes_read_per_token", t.bytes_per_token},
      {"expert_bytes_read_per_token", mean(d.ebytes)},
      {"spine_bytes_read_per_token", mean(d.sbytes)},
      {"expert_bytes_needed_per_token", mean(d.need)},
      {"expert_bytes_read_per_token_median", median(d.ebytes)},
      {"read_gbps", total > 0 ? double(d.read_total) / total / 1e9 : 0},
      // Below 1% of the decode, the stall is too short for a rate (the bytes arrived during compute): 0.
      {"read_gbps_while_stalled", d.stall_total > 0.01 * total ? double(d.landed_while_stalled) / d.stall_total / 1e9 : 0},
      {"io_stall_fraction", total > 0 ? d.stall_total / total : 0},
      {"stall_seconds_per_token", d.stall_total / t.n},
      {"verify_seconds_per_token", d.verify_total / t.n},
      {"verify_fraction", total > 0 ? d.verify_total / total : 0},
      {"prefill_verify_seconds", pm.verify},
      {"compute_seconds_per_token", t.compute_s},
      {"cache_hit_rate", t.hit_rate},
      {"cache_ready_rate", t.ready_rate},
      {"device", plan.device.name()},
      {"prefill_tokens_per_second", pm.seconds > 0 ? double(run.prompt_tokens) / pm.seconds : 0},
      {"device_bytes_copied_per_token", mean(d.dbytes)},
      {"device_copy_fraction", total > 0 ? d.copy_total / total : 0},
      // Beside a GPU: the engine's choice (engine/expert_placement.h: asked, what it runs as, auto's row
      // bound and what it measured); decode() adds per decoded token each side's expert calls (an expert
      // over its rows) and the host's seconds in its calls (zeros on the CPU and with every expert on the GPU).
      {"expert_placement", run.placed ? run.placed->to_json() : nlohmann::json{{"experts_on", "cpu"}}},
      {"prefetch_recall", t.recall},
      {"prefetch_issued", st.prefetch_issued},
      {"prefetch_wasted_bytes", st.prefetch_wasted_bytes},
      {"prefetch_by_layer", run.guesses},
      {"duplicate_loads", st.duplicate_loads},
      {"total_storage_bytes_read", process_read_bytes() - run.io0},
      {"peak_rss_bytes", process_peak_rss()},
      {"drives", run.drives},
      {"per_token", d.per_token},
  };
}

// Prefill, then each greedy decode step timed with its I/O.
BenchResult decode(const BenchRequest& r, Ticker& tick) {
  // The drive's rate first, before the decode's engine exists: probed after it, in the memory the
  // decode had just freed, the same reads ran at 0.7-1.0 GB/s instead of 3.1-4.0 here (a VM whose
  // host takes back freed guest pages; fio right before the run: 2.3-3.1 GB/s).
  if (r.probe_seconds > 0) tick.say(fmt::format("bench: probing the drive for {} s", r.probe_seconds), true);
  const double drive_bps = r.probe_seconds > 0 ? probe_drive_bps(r, r.probe_seconds) : 0;
  auto model = Engine::open(r.model, r.mem);
  auto overridden = std::make_unique<RoutingOverride>(*model, r);
  if (!overridden->label().empty()) tick.say("bench: " + overridden->label(), true);
  const MemoryPlan plan = model->plan();
  const std::optional<ExpertPlacement> placed =
      model->expert_placement() ? std::optional<ExpertPlacement>(*model->expert_placement()) : std::nullopt;
  const std::vector<int32_t> prompt = make_prompt(r, model->info().vocab);
  auto session = std::make_unique<Session>(model->session());
  Session& s = *session;
  if (r.chunk > 0) s.set_prefill_chunk(r.chunk);
  if (r.span >= 0) s.set_prefill_span(r.span);
  const uint64_t io0 = process_read_bytes();
  PrefillMeasure pm;
  const std::vector<float>* lg = time_prefill(*model, s, prompt, tick, pm);
  auto routes = std::make_unique<RouteRecorder>(*model);
  const StreamingExperts* reader = model->streaming_experts();
  const std::vector<DriveStats> drives0 = reader ? reader->drive_stats() : std::vector<DriveStats>{};
  const std::vector<LayerPrefetchStats> guesses0 = reader ? reader->prefetch_by_layer() : std::vector<LayerPrefetchStats>{};
  const DecodeSteps d = time_decode(*model, s, lg, r, tick);
  const ExpertStats st = model->expert_stats();
  const nlohmann::json drives = drives_json(drives0, reader ? reader->drive_stats() : std::vector<DriveStats>{}, d.decode_total);
  std::string guess_line;
  const nlohmann::json guesses =
      prefetch_guesses(guesses0, reader ? reader->prefetch_by_layer() : std::vector<LayerPrefetchStats>{}, guess_line);
  const DecodeTotals t = decode_totals(r, d, st);
  BenchResult res;
  res.json = decode_json({r, *model, s, prompt.size(), pm, d, st, t, drives, guesses, placed, io0});
  nlohmann::json& per_side = res.json["expert_placement"];
  per_side["cpu"] = double(d.host_calls) / t.n;
  per_side["gpu"] = double(d.device_calls) / t.n;
  per_side["cpu_seconds_per_token"] = d.host_expert_s / t.n;
  per_side["pcie_bytes_per_token"] = mean(d.dbytes);
  const std::string streamed_layers = fmt::format("{}", model->spine_stats().streamed_layers);
  const RoutingStats routing = routes->stats();
  routes.reset();  // holds the model: before the model goes
  res.json["routing"] = routing.to_json();
  res.json["routing_override"] = overridden->json();
  const std::string override_label = overridden->label();
  overridden.reset();
  session.reset();
  model.reset();
  const std::string drive_part = decode_floor(drive_bps, r, t.bytes_per_token, t.compute_s, t.mean_s, res);
  res.summary.push_back(fmt::format(
      "{}: {:.3f} tokens/s mean over {} tokens ({:.4f} s/token); per token median {:.4f} s, p90 {:.4f}, max {:.4f}; "
      "stall {:.0f}%, verification {:.0f}%; read {}/token (experts {}, spine {}; needed {}), hit rate {:.1f}% ({:.1f}% read "
      "already, the rest being read), prefetch recall {:.1f}%; "
      "reads while stalled {}; prefill {:.2f} s for {} tokens in {} span(s) (experts read {}, distinct routed {}, "
      "expert cache lent {}); spine layers streamed {}; peak RSS {} (budget {})",
      r.model, res.json["tokens_per_second"].get<double>(), r.tokens, t.mean_s, median(d.secs), quantile(d.secs, 0.9),
      quantile(d.secs, 1.0), 100 * res.json["io_stall_fraction"].get<double>(),
      100 * res.json["verify_fraction"].get<double>(), human_bytes(t.bytes_per_token),
      human_bytes(mean(d.ebytes)), human_bytes(mean(d.sbytes)), human_bytes(mean(d.need)), 100 * t.hit_rate,
      100 * t.ready_rate, 100 * t.recall, drive_part, pm.seconds, prompt.size(), pm.spans["count"].get<int64_t>(),
      human_bytes(double(pm.read)), human_bytes(double(pm.distinct)),
      human_bytes(pm.spans["cache_lent_bytes"].get<double>()), streamed_layers, human_bytes(double(process_peak_rss())),
      human_bytes(double(plan.budget))));
  if (!drives_summary(drives).empty()) res.summary.push_back(drives_summary(drives));
  if (!guess_line.empty()) res.summary.push_back("next-layer guesses right (of the experts the cache lacked): " + guess_line);
  res.summary.push_back(routing_summary(routing));
  if (!override_label.empty()) {  // first and last, loudly: these are not the model's tokens
    res.summary.insert(res.summary.begin(), override_label);
    res.summary.push_back(override_label);
  }
  if (plan.device.cuda()) res.summary.push_back(decode_gpu_line(r, plan.device.name(), placed, d, res));
  return res;
}

// The passes of a batched decode, each timed with its I/O.
struct BatchedPasses {
  nlohmann::json per_pass = nlohmann::json::array();
  std::vector<double> secs;
  double total = 0, stall = 0, routed = 0, exchange = 0;
  uint64_t expert_read = 0, spine_read = 0, needed = 0;
};

// r.tokens passes, each feeding every sequence its greedy next token together.
BatchedPasses time_batched_passes(const Engine& model, const std::vector<Session*>& seqs, const BenchRequest& r,
                                  Ticker& tick) {
  const int64_t B = int64_t(seqs.size());
  BatchedPasses p;
  ExpertStats prev = model.expert_stats();
  uint64_t io_prev = process_read_bytes();
  // Each timed pass's routes: per MoE layer the distinct experts and how many of the pass's rows
  // picked each (the whole pass's, on every rank), so a model of the pass can split them as ranks would.
  nlohmann::json routes = nlohmann::json::array();
  struct ObserverGuard {
    const Engine& e;
    ~ObserverGuard() { e.set_request_observer({}); }
  } guard{model};
  model.set_request_observer([&routes](int32_t layer, const int32_t* x, const int64_t* rows, int64_t n) {
    routes.push_back(
        {{"layer", layer}, {"experts", std::vector<int32_t>(x, x + n)}, {"rows", std::vector<int64_t>(rows, rows + n)}});
  });
  std::vector<std::vector<int32_t>> next(static_cast<size_t>(B));
  for (int64_t step = 0; step < r.tokens; ++step) {
    for (int64_t i = 0; i < B; ++i) {
      const auto& lg = seqs[size_t(i)]->last_logits();
      next[size_t(i)] = {argmax(lg.data(), int64_t(lg.size()))};
    }
    auto a = Clock::now();
    Session::feed_together(seqs, next);
    const double dt = seconds_since(a);
    const ExpertStats st = model.expert_stats();
    const uint64_t io = process_read_bytes();
    const uint64_t er = st.bytes_read - prev.bytes_read;
    const uint64_t sr = (io - io_prev) > er ? (io - io_prev) - er : 0;
    const double routed_s = st.routed_expert_seconds - prev.routed_expert_seconds;
    const double exchange_s = st.exchange_seconds - prev.exchange_seconds;
    p.per_pass.push_back({{"seconds", dt}, {"expert_bytes_read", er}, {"spine_bytes_read", sr},
                          {"expert_bytes_needed", st.bytes_needed - prev.bytes_needed},
                          {"stall_seconds", st.stall_seconds - prev.stall_seconds},
                          {"routed_expert_seconds", routed_s}, {"exchange_seconds", exchange_s},
                          {"routes", std::exchange(routes, nlohmann::json::array())}});
    p.secs.push_back(dt);
    p.total += dt;
    p.routed += routed_s;
    p.exchange += exchange_s;
    p.stall += st.stall_seconds - prev.stall_seconds;
    p.expert_read += er;
    p.spine_read += sr;
    p.needed += st.bytes_needed - prev.bytes_needed;
    prev = st;
    io_prev = io;
    tick.say(fmt::format("bench: batch {}: {} of {} passes ({:.3f} s/pass, {:.3f} tokens/s)", B, step + 1, r.tokens,
                         p.total / double(step + 1), double(B * (step + 1)) / p.total),
             step + 1 == r.tokens);
  }
  return p;
}

// B sequences, each with its own random prompt (seed + i) prefilled alone,
// then decoded greedily together: one forward pass per step feeds every
// sequence its next token. Aggregate tokens/s and bytes per generated token.
BenchResult batched(const BenchRequest& r, Ticker& tick) {
  MemoryRequest mem = r.mem;
  mem.sequences = r.batch;
  auto model = Engine::open(r.model, mem);
  const RoutingOverride overridden(*model, r);
  if (!overridden.label().empty()) tick.say("bench: " + overridden.label(), true);
  const MemoryPlan& plan = model->plan();
  const int64_t B = r.batch;
  std::vector<std::unique_ptr<Session>> owned;
  std::vector<Session*> seqs;
  const uint64_t io0 = process_read_bytes();
  const ExpertStats e0 = model->expert_stats();
  const Engine::SpanMemory spans0 = model->span_memory();
  uint64_t prefill_distinct = 0;
  int64_t prompt_total = 0;
  const double wait0 = read_wait_seconds(*model);
  auto t0 = Clock::now();
  {
    RoutedExperts routed(*model);
    for (int64_t i = 0; i < B; ++i) {
      BenchRequest ri = r;
      ri.seed = r.seed + uint64_t(i);
      const std::vector<int32_t> prompt = make_prompt(ri, model->info().vocab);
      tick.say(fmt::format("bench: prefilling sequence {} of {} ({} tokens)", i + 1, B, prompt.size()), true);
      owned.push_back(std::make_unique<Session>(model->session()));
      if (r.chunk > 0) owned.back()->set_prefill_chunk(r.chunk);
      if (r.span >= 0) owned.back()->set_prefill_span(r.span);
      routed.clear();
      owned.back()->feed(prompt);
      prefill_distinct += routed.distinct_bytes();
      prompt_total += int64_t(prompt.size());
      seqs.push_back(owned.back().get());
    }
  }
  const double prefill = seconds_since(t0);
  const uint64_t prefill_read = model->expert_stats().bytes_read - e0.bytes_read;
  // Time the B prefills waited for expert and spine reads; the rest is compute.
  const double prefill_stall = read_wait_seconds(*model) - wait0;
  const BatchedPasses p = time_batched_passes(*model, seqs, r, tick);
  const double generated = double(B * r.tokens);
  const double agg = p.total > 0 ? generated / p.total : 0;
  const double passes = double(r.tokens);
  BenchResult res;
  res.json = {{"model", r.model},
              {"batch", B},
              {"ram_bytes", plan.budget},
              {"plan", plan.describe()},
              {"memory_plan", plan.to_json()},
              {"spine_streamed_layers", model->spine_stats().streamed_layers},
              {"tokens", r.tokens},
              {"prompt_tokens", prompt_total},
              {"prefill_seconds", prefill},
              {"prefill_stall_seconds", prefill_stall},
              {"prefill_chunk", seqs.front()->prefill_chunk()},
              {"prefill_span", seqs.front()->prefill_span()},
              {"prefill_spans", prefill_span_json(*model, spans0)},
              {"prefill_expert_bytes_read", prefill_read},
              {"prefill_distinct_expert_bytes", prefill_distinct},
              {"seconds_per_pass", median(p.secs)},
              {"aggregate_tokens_per_second", agg},
              {"tokens_per_second_per_sequence", p.total > 0 ? double(r.tokens) / p.total : 0},
              {"expert_bytes_read_per_token", double(p.expert_read) / generated},
              {"spine_bytes_read_per_token", double(p.spine_read) / generated},
              {"bytes_read_per_token", double(p.expert_read + p.spine_read) / generated},
              {"expert_bytes_needed_per_token", double(p.needed) / generated},
              {"io_stall_fraction", p.total > 0 ? p.stall / p.total : 0},
              {"total_storage_bytes_read", process_read_bytes() - io0},
              {"peak_rss_bytes", process_peak_rss()},
              {"routing_override", overridden.json()},
              {"routed_expert_seconds_per_pass", p.routed / passes},
              {"exchange_seconds_per_pass", p.exchange / passes},
              {"per_pass", p.per_pass}};
  // Under expert parallelism: the fastest and the slowest rank's time a pass in their routed experts
  // and in the exchange (every rank runs this bench, so every rank takes part in these collectives).
  if (ExpertExchange* x = expert_exchange()) {
    const auto ns = [&](double s) { return int64_t(std::llround(s / passes * 1e9)); };
    const auto range = [&](double s) {
      return nlohmann::json::array({double(x->agree_min(ns(s))) * 1e-9, double(-x->agree_min(-ns(s))) * 1e-9});
    };
    res.json["ranks"] = {{"count", x->ranks()},
                         {"routed_expert_seconds_per_pass", range(p.routed)},
                         {"exchange_seconds_per_pass", range(p.exchange)}};
  }
  if (!overridden.label().empty()) res.summary.push_back(overridden.label());
  res.summary.push_back(fmt::format(
      "{}: batch {}: {:.3f} tokens/s aggregate ({:.4f} s/pass median over {} passes), read per generated token: "
      "experts {}, spine {} (needed experts {}), stall {:.0f}%, prefill {:.2f} s for {} tokens, peak RSS {} (budget {})",
      r.model, B, agg, median(p.secs), r.tokens, human_bytes(double(p.expert_read) / generated),
      human_bytes(double(p.spine_read) / generated), human_bytes(double(p.needed) / generated),
      100 * res.json["io_stall_fraction"].get<double>(), prefill, prompt_total,
      human_bytes(double(process_peak_rss())), human_bytes(double(plan.budget))));
  if (!overridden.label().empty()) res.summary.push_back(overridden.label());
  return res;
}

}  // namespace

BenchResult run_benchmark(const BenchRequest& req, const Progress_fn& progress) {
  BenchRequest r = req;
  check_memory_request(r.mem);
  if (!(r.mem.ram_gib > 0)) fail("bench: --ram must be a positive number of GiB (the memory budget to measure in)");
  if (r.tokens < 1 || r.prompt_tokens < 1) fail("--tokens and --prompt-tokens must be >= 1");
  if (r.repeat_prompt < 1) fail("--repeat-prompt must be >= 1, got {}", r.repeat_prompt);
  if (r.draft_max < 1) fail("--draft-max must be >= 1, got {}", r.draft_max);
  if (r.chunk < 0) fail("--prefill-chunk must be >= 1 (or 0: as the memory plan allows), got {}", r.chunk);
  if (r.batch < 0) fail("--batch must be >= 1, got {}", r.batch);
  if (r.batch > 0 && (r.io_only || r.generate || r.speculate || replaying(r) || !r.draft_model.empty()))
    fail("--batch measures plain greedy decode; it cannot be combined with --io-only, --generate, --speculate, "
         "--replay-drafts or --draft-model");
  if (!r.draft_model.empty() && replaying(r))
    fail("--draft-model and --replay-drafts are two drafters: give one of them");
  if (r.draft_retokenize && r.draft_model.empty()) fail("--draft-retokenize is about a --draft-model: give one");
  if (!r.routing_trace.empty() && !r.routing_synthetic.empty())
    fail("--routing-trace and --routing-synthetic are two routing sources: give one of them");
  const bool overridden = !r.routing_trace.empty() || !r.routing_synthetic.empty();
  if (overridden && (r.io_only || r.generate || r.speculate || replaying(r) || !r.draft_model.empty()))
    fail("--routing-trace / --routing-synthetic measure decode (plain or --batch); they cannot be combined with "
         "--io-only, --generate, --speculate, --replay-drafts or --draft-model");
  if (!r.routing_synthetic.empty()) parse_synthetic_routing(r.routing_synthetic);  // its errors before the model opens
  const int64_t prompt_len = (r.prompt.empty() ? r.prompt_tokens : int64_t(r.prompt.size())) * r.repeat_prompt;
  if (r.mem.context_tokens == 0) r.mem.context_tokens = prompt_len + r.tokens + 1 + r.draft_max;
  Ticker tick(progress);
  tick.say(fmt::format("bench: opening {}", r.model), true);
  if (r.io_only) return io_only(r, tick);
  if (r.generate || r.speculate || replaying(r) || !r.draft_model.empty()) return generation(r, tick);
  if (r.batch > 0) return batched(r, tick);
  return decode(r, tick);
}

}  // namespace sluice
