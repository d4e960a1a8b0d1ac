// sluice bench: decode speed and I/O of a model with experts streamed from
// storage under a RAM budget. Prints a one-line summary and writes JSON.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "cli/bench_kernels.h"
#include "cli/commands.h"
#include "cli/text_generation.h"
#include "engine/engine.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/process_stats.h"
#include "util/progress.h"

namespace sluice::cli {
namespace {

struct BenchOpts {
  std::string model, json_out, policy = "lru", queue = "auto";
  double ram_gb = 0;
  int64_t tokens = 16, prompt_tokens = 16, chunk = 64;
  uint64_t seed = 1;
  bool no_prefetch = false, buffered = false, io_only = false, speculate = false, generate = false, kernels = false;
  int64_t draft_max = 8, repeat_prompt = 1, replay_wrong_every = -1;
  std::string prompt_from, prompt_file, heat_file;
  int queue_depth = 128;
  uint32_t chunk_kb = 1024;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Reads only: for each token and MoE layer, top-k uniformly random experts are
// requested and acquired through the same reader and cache, with no compute,
// the next step's experts prefetched while the current ones are consumed.
// This is the reader's raw throughput on the model's real expert extents.
int run_io_only(const BenchOpts& o, const StreamingOptions& so) {
  using clock = std::chrono::steady_clock;
  auto engine = Engine::open(o.model);
  const ExpertTable& table = engine->experts();
  StreamingExperts src(table, engine->checkpoint(), so);
  const int64_t k = engine->expert_index().layout().top_k;
  std::mt19937_64 rng(o.seed);
  std::vector<std::pair<int32_t, std::vector<int32_t>>> steps;  // (layer, experts) in decode order
  for (int64_t t = 0; t < o.tokens; ++t)
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
  // Each step's experts are requested, the next step's are prefetched (as a
  // perfect predictor would), then the step's experts are consumed.
  const auto t0 = clock::now();
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& [l, ids] = steps[i];
    src.request(l, ids.data(), int64_t(ids.size()));
    if (i + 1 < steps.size()) src.prefetch(steps[i + 1].first, steps[i + 1].second.data(), int64_t(steps[i + 1].second.size()));
    for (int32_t e : ids) {
      src.acquire(l, e);
      src.release(l, e);
    }
  }
  const double secs = std::chrono::duration<double>(clock::now() - t0).count();
  ExpertStats st = src.stats();
  nlohmann::json j = {{"model", o.model}, {"io_only", true}, {"tokens", o.tokens}, {"experts_per_layer", k},
                      {"reader", src.queue_name()}, {"direct_io", src.direct_io()}, {"queue_depth", so.queue_depth},
                      {"read_chunk_bytes", so.chunk_bytes}, {"cache_bytes", src.cache_bytes()},
                      {"expert_bytes_read", st.bytes_read}, {"seconds", secs},
                      {"read_gbps", double(st.bytes_read) / secs / 1e9}, {"cache_hit_rate",
                      st.hits + st.misses ? double(st.hits) / double(st.hits + st.misses) : 0.0}};
  std::printf("%s: io-only %s read in %.2f s = %.2f GB/s (%s, %s, queue depth %d, %u KiB reads, hit rate %.1f%%)\n",
              o.model.c_str(), human_bytes(double(st.bytes_read)).c_str(), secs, j["read_gbps"].get<double>(),
              src.queue_name().c_str(), src.direct_io() ? "O_DIRECT" : "buffered", so.queue_depth, so.chunk_bytes / 1024,
              100 * j["cache_hit_rate"].get<double>());
  if (!o.json_out.empty()) std::ofstream(o.json_out) << j.dump(2) << "\n";
  return 0;
}

// Greedy generation of --tokens tokens, plain or speculative, through the same
// decoding loop; means per generated token. Counters start when the first token
// is out, i.e. after the prompt's prefill. `text` receives prompt + output.
nlohmann::json measure_generation(const BenchOpts& o, const Model& model, const std::vector<int32_t>& prompt,
                                  Drafter* drafter, const char* label, std::vector<int32_t>* text = nullptr) {
  using clock = std::chrono::steady_clock;
  Session g(model);
  g.set_prefill_chunk(o.chunk);
  SpeculationOptions so;
  so.max_draft = o.draft_max;
  SpeculationStats st;
  ExpertStats e0;
  uint64_t io0 = 0;
  clock::time_point t_first;
  const auto t0 = clock::now();
  double prefill = 0;
  const int64_t V = model.info().vocab;
  auto greedy = [V](float* logits) { return argmax(logits, V); };
  std::vector<int32_t> out = generate(g, prompt, o.tokens + 1, true, greedy, drafter, so, &st, [&](int32_t) {
    if (st.generated == 1) {
      t_first = clock::now();
      prefill = std::chrono::duration<double>(t_first - t0).count();
      e0 = model.expert_stats();
      io0 = process_read_bytes();
    }
  });
  const double gen = std::chrono::duration<double>(clock::now() - t_first).count();
  const ExpertStats e1 = model.expert_stats();
  const double n = double(std::max<int64_t>(1, st.generated - 1));
  if (text) {
    *text = prompt;
    text->insert(text->end(), out.begin(), out.end());
  }
  nlohmann::json j = {{"model", o.model}, {"mode", label}, {"draft_max", o.draft_max},
                      {"prompt_tokens", prompt.size()}, {"tokens", st.generated - 1}, {"prefill_seconds", prefill},
                      {"seconds_per_token", gen / n}, {"verify_passes", st.passes},
                      {"forward_passes", st.forward_passes()}, {"proposed", st.proposed},
                      {"accepted", st.accepted}, {"acceptance", st.acceptance()},
                      {"expert_bytes_read_per_token", double(e1.bytes_read - e0.bytes_read) / n},
                      {"expert_bytes_needed_per_token", double(e1.bytes_needed - e0.bytes_needed) / n},
                      {"storage_bytes_read", process_read_bytes() - io0}, {"peak_rss_bytes", process_peak_rss()}};
  std::printf("%s: %s %.4f s/token over %lld tokens (%lld forward passes, acceptance %.1f%%), prefill %.2f s for %zu "
              "tokens, experts read %s/token (needed %s/token), peak RSS %s\n",
              o.model.c_str(), label, gen / n, (long long)(st.generated - 1), (long long)st.forward_passes(),
              100 * st.acceptance(), prefill, prompt.size(),
              human_bytes(j["expert_bytes_read_per_token"].get<double>()).c_str(),
              human_bytes(j["expert_bytes_needed_per_token"].get<double>()).c_str(),
              human_bytes(double(process_peak_rss())).c_str());
  std::fflush(stdout);
  return j;
}

// --generate, --speculate, or --replay-drafts (a plain run, then speculation
// with its own tokens as drafts, each on a freshly loaded model so both start
// with a cold expert cache).
int run_generation(const BenchOpts& o, const LoadOptions& lo, const std::vector<int32_t>& prompt) {
  nlohmann::json j;
  if (o.replay_wrong_every >= 0) {
    std::vector<int32_t> text;
    nlohmann::json plain = measure_generation(o, *load_model(o.model, lo), prompt, nullptr, "plain", &text);
    auto model = load_model(o.model, lo);
    ReplayDrafter d(text, o.replay_wrong_every, model->info().vocab);
    nlohmann::json spec = measure_generation(o, *model, prompt, &d, "replayed-drafts");
    const double r = spec["seconds_per_token"].get<double>() / plain["seconds_per_token"].get<double>();
    const double b = spec["expert_bytes_read_per_token"].get<double>() /
                     std::max(1.0, plain["expert_bytes_read_per_token"].get<double>());
    std::printf("speculative / plain: %.2fx time per token, %.2fx expert bytes read per token\n", r, b);
    j = {{"plain", plain}, {"speculative", spec}, {"time_ratio", r}, {"expert_read_ratio", b}};
  } else {
    NgramDrafter drafter;
    j = measure_generation(o, *load_model(o.model, lo), prompt, o.speculate ? &drafter : nullptr,
                           o.speculate ? "speculative" : "plain");
  }
  if (!o.json_out.empty()) std::ofstream(o.json_out) << j.dump(2) << "\n";
  return 0;
}

int run_bench(const BenchOpts& o) {
  using clock = std::chrono::steady_clock;
  if (o.ram_gb <= 0) fail("--ram must be a positive number of GB");
  if (o.tokens < 1 || o.prompt_tokens < 1) fail("--tokens and --prompt-tokens must be >= 1");
  const uint64_t ram = uint64_t(o.ram_gb * 1e9);
  // Probe the spine size with a resident load (maps files, reads nothing but small vectors).
  uint64_t spine = 0, experts = 0;
  {
    auto probe = load_model(o.model);
    spine = probe->spine_bytes();
    experts = probe->routed_expert_bytes();
  }
  // Scratch and state: a fixed reserve, smaller for tiny budgets.
  const uint64_t reserve = std::min<uint64_t>(ram / 5, 768ull << 20);
  LoadOptions lo;
  lo.stream_experts = true;
  lo.prefetch = !o.no_prefetch;
  // A spine that leaves less than a quarter of the budget to the expert cache
  // is streamed layer by layer within three quarters of it.
  if (spine + reserve <= ram / 4 * 3) {
    lo.streaming.cache_bytes = ram - spine - reserve;
  } else {
    if (reserve >= ram) fail("--ram {} GB leaves nothing after {} of working memory", o.ram_gb, human_bytes(double(reserve)));
    lo.spine_budget = (ram - reserve) / 4 * 3;
    lo.streaming.cache_bytes = ram - reserve - lo.spine_budget;
  }
  lo.streaming.policy = o.policy;
  lo.streaming.heat_file = o.heat_file.empty() ? o.model + "/sluice-expert-heat.txt" : o.heat_file;
  lo.streaming.direct = !o.buffered;
  lo.streaming.queue = o.queue == "uring" ? ReadQueue::Kind::IoUring
                       : o.queue == "threads" ? ReadQueue::Kind::Threads
                                              : ReadQueue::Kind::Auto;
  if (o.queue != "auto" && o.queue != "uring" && o.queue != "threads") fail("--queue must be auto, uring or threads");
  if (o.queue_depth < 1 || o.chunk_kb < 4 || o.chunk_kb % 4) fail("--queue-depth must be >= 1 and --read-kb a multiple of 4");
  lo.streaming.queue_depth = o.queue_depth;
  lo.streaming.chunk_bytes = o.chunk_kb * 1024;
  if (o.io_only) return run_io_only(o, lo.streaming);
  // Generation benchmarks load the model themselves (fresh per measurement).
  const bool generation = o.speculate || o.generate || o.replay_wrong_every >= 0;
  auto model = load_model(o.model, generation ? LoadOptions{} : lo);
  const int64_t V = model->info().vocab;
  std::mt19937_64 rng(o.seed);
  std::vector<int32_t> prompt(static_cast<size_t>(o.prompt_tokens));
  for (auto& t : prompt) t = int32_t(rng() % uint64_t(V));
  if (!o.prompt_from.empty()) prompt = tokens_from_safetensors(o.prompt_from);
  if (!o.prompt_file.empty()) {
    std::ifstream in(o.prompt_file, std::ios::binary);
    if (!in) fail("{}: cannot read the prompt file", o.prompt_file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    prompt = encode_prompt(*text::Tokenizer::load(o.model), *model, text);
  }
  {
    const std::vector<int32_t> once = prompt;  // copy-heavy prompts: the same text several times
    for (int64_t r = 1; r < o.repeat_prompt; ++r) prompt.insert(prompt.end(), once.begin(), once.end());
  }
  if (generation) {
    model.reset();
    return run_generation(o, lo, prompt);
  }

  Session s(*model);
  s.set_prefill_chunk(o.chunk);
  const uint64_t io0 = process_read_bytes();
  auto t0 = clock::now();
  const std::vector<float>* lg = &s.feed(prompt);
  const double prefill = std::chrono::duration<double>(clock::now() - t0).count();
  ExpertStats prev = model->expert_stats();
  uint64_t io_prev = process_read_bytes();
  nlohmann::json per_token = nlohmann::json::array();
  std::vector<double> secs, ebytes, sbytes, need;
  double decode_total = 0, stall_total = 0;
  uint64_t read_total = 0;
  for (int64_t i = 0; i < o.tokens; ++i) {
    const int32_t next = argmax(lg->data(), int64_t(lg->size()));
    auto a = clock::now();
    lg = &s.feed({next});
    const double dt = std::chrono::duration<double>(clock::now() - a).count();
    ExpertStats st = model->expert_stats();
    const uint64_t io = process_read_bytes();
    const uint64_t er = st.bytes_read - prev.bytes_read;
    const uint64_t sr = (io - io_prev) > er ? (io - io_prev) - er : 0;
    const uint64_t nd = st.bytes_needed - prev.bytes_needed;
    const double stall = st.stall_seconds - prev.stall_seconds;
    per_token.push_back({{"seconds", dt}, {"expert_bytes_read", er}, {"spine_bytes_read", sr},
                         {"expert_bytes_needed", nd}, {"stall_seconds", stall},
                         {"cache_hits", st.hits - prev.hits}, {"cache_misses", st.misses - prev.misses}});
    secs.push_back(dt);
    ebytes.push_back(double(er));
    sbytes.push_back(double(sr));
    need.push_back(double(nd));
    decode_total += dt;
    stall_total += stall;
    read_total += er;
    prev = st;
    io_prev = io;
  }
  ExpertStats st = model->expert_stats();
  const double hit_rate = st.hits + st.misses ? double(st.hits) / double(st.hits + st.misses) : 0;
  const double recall = st.requests ? double(st.prefetch_used) / double(st.requests) : 0;
  nlohmann::json j = {
      {"model", o.model},
      {"ram_bytes", ram},
      {"spine_bytes", spine},
      {"routed_expert_bytes", experts},
      {"cache_bytes", lo.streaming.cache_bytes},
      {"spine_budget_bytes", lo.spine_budget},
      {"spine_resident_layers", model->spine_stats().resident_layers},
      {"spine_streamed_layers", model->spine_stats().streamed_layers},
      {"spine_stream_bytes_read", model->spine_stats().bytes_read},
      {"spine_stall_seconds", model->spine_stats().stall_seconds},
      {"policy", o.policy},
      {"prefetch", !o.no_prefetch},
      {"tokens", o.tokens},
      {"prompt_tokens", prompt.size()},
      {"seconds_per_token", median(secs)},
      {"prefill_seconds", prefill},
      {"expert_bytes_read_per_token", median(ebytes)},
      {"spine_bytes_read_per_token", median(sbytes)},
      {"expert_bytes_needed_per_token", median(need)},
      {"read_gbps", decode_total > 0 ? double(read_total) / decode_total / 1e9 : 0},
      {"read_gbps_while_stalled", stall_total > 0 ? double(read_total) / stall_total / 1e9 : 0},
      {"io_stall_fraction", decode_total > 0 ? stall_total / decode_total : 0},
      {"cache_hit_rate", hit_rate},
      {"prefetch_recall", recall},
      {"prefetch_issued", st.prefetch_issued},
      {"prefetch_wasted_bytes", st.prefetch_wasted_bytes},
      {"duplicate_loads", st.duplicate_loads},
      {"total_storage_bytes_read", process_read_bytes() - io0},
      {"peak_rss_bytes", process_peak_rss()},
      {"per_token", per_token},
  };
  std::printf(
      "%s: %.4f s/token (median of %lld), prefill %.2f s for %lld tokens, experts read %s/token (needed %s), "
      "spine read %s/token (%lld layers streamed), %.2f GB/s, stall %.0f%%, hit rate %.1f%%, prefetch recall %.1f%%, peak RSS %s "
      "(budget %s)\n",
      o.model.c_str(), median(secs), (long long)o.tokens, prefill, (long long)prompt.size(),
      human_bytes(median(ebytes)).c_str(), human_bytes(median(need)).c_str(), human_bytes(median(sbytes)).c_str(),
      (long long)model->spine_stats().streamed_layers, j["read_gbps"].get<double>(), 100 * j["io_stall_fraction"].get<double>(), 100 * hit_rate, 100 * recall,
      human_bytes(double(process_peak_rss())).c_str(), human_bytes(double(ram)).c_str());
  if (!o.json_out.empty()) {
    std::ofstream out(o.json_out);
    if (!out) fail("{}: cannot write", o.json_out);
    out << j.dump(2) << "\n";
  }
  return 0;
}

void add_bench_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("bench", "Measure decoding with routed experts streamed from disk under a RAM budget");
  auto o = std::make_shared<BenchOpts>();
  auto* model = cmd->add_option("--model", o->model, "Model directory (required unless --kernels)");
  auto* ram = cmd->add_option("--ram", o->ram_gb, "RAM budget in GB (spine + expert cache + state + scratch; required unless --kernels)");
  cmd->add_flag("--kernels", o->kernels,
                "Measure the compute kernels alone (no model): DRAM read bandwidth, every weight format's matvec "
                "(7168 x 16384) and 16/64-token products against the ISA's peak; --json writes them")
      ->excludes(model)
      ->excludes(ram);
  cmd->add_option("--tokens", o->tokens, "Decode steps to time")->capture_default_str();
  cmd->add_option("--prompt-tokens", o->prompt_tokens, "Random prompt length (prefilled first)")->capture_default_str();
  cmd->add_option("--prefill-chunk", o->chunk, "Prefill chunk size in tokens")->capture_default_str();
  cmd->add_option("--json", o->json_out, "Write the full results (with per-token lists) here");
  cmd->add_option("--policy", o->policy, "Expert cache policy: lru, lfu or heat (use counts kept across runs)")
      ->capture_default_str();
  cmd->add_option("--heat-file", o->heat_file, "heat policy: counts file (default MODEL/sluice-expert-heat.txt)");
  cmd->add_option("--queue", o->queue, "Reader: auto, uring or threads")->capture_default_str();
  cmd->add_flag("--no-prefetch", o->no_prefetch, "Do not predict the next layer's experts");
  cmd->add_flag("--buffered", o->buffered, "Use the page cache instead of O_DIRECT");
  cmd->add_option("--seed", o->seed, "Seed of the random prompt")->capture_default_str();
  cmd->add_option("--queue-depth", o->queue_depth, "Reads in flight at most")->capture_default_str();
  cmd->add_option("--read-kb", o->chunk_kb, "Size of each read in KiB (experts are split into reads of this size)")
      ->capture_default_str();
  cmd->add_flag("--io-only", o->io_only, "Only read experts (random top-k per layer and token), no compute");
  cmd->add_flag("--generate", o->generate,
                "Time greedy generation as a whole (means per generated token, forward passes, expert bytes); "
                "the baseline for --speculate");
  cmd->add_flag("--speculate", o->speculate, "As --generate, with n-gram speculative decoding");
  cmd->add_option("--draft-max", o->draft_max, "Most draft tokens verified per pass")->capture_default_str();
  cmd->add_option("--replay-drafts", o->replay_wrong_every,
                  "Plain generation, then speculation whose drafts are that run's own tokens with every K-th one "
                  "wrong (0: none): what speculation gains or costs at a known acceptance, e.g. on random weights");
  auto* pf = cmd->add_option("--prompt-from", o->prompt_from, "Prompt token ids from FILE:TENSOR instead of random ids");
  cmd->add_option("--prompt-file", o->prompt_file, "Prompt text from FILE, encoded with the model's tokenizer")
      ->excludes(pf);
  cmd->add_option("--repeat-prompt", o->repeat_prompt, "Repeat the prompt this many times (copy-heavy input)")
      ->capture_default_str();
  cmd->callback([o, model, ram, &action] {
    if (o->kernels) {
      action = [o] { return run_kernels_bench(o->json_out); };
      return;
    }
    if (model->count() == 0) throw CLI::RequiredError("--model");
    if (ram->count() == 0) throw CLI::RequiredError("--ram");
    action = [o] { return run_bench(*o); };
  });
}

}  // namespace
SLUICE_COMMAND(50, add_bench_command);

}  // namespace sluice::cli
