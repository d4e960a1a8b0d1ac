#include "server/metrics.h"

#include <algorithm>

#include <fmt/format.h>

namespace sluice::server {

Metrics::Metrics()
    : bucket_bounds_{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}, buckets_(bucket_bounds_.size() + 1) {}

Route route_of(const std::string& path) {
  if (path == "/v1/chat/completions") return Route::ChatCompletions;
  if (path == "/v1/completions") return Route::Completions;
  if (path == "/v1/messages") return Route::Messages;
  if (path == "/v1/messages/count_tokens") return Route::CountTokens;
  if (path == "/v1/responses") return Route::Responses;
  if (path.rfind("/v1/responses/", 0) == 0) return Route::Response;
  if (path == "/v1/models") return Route::Models;
  if (path.rfind("/v1/models/", 0) == 0) return Route::Model;
  if (path == "/health") return Route::Health;
  if (path == "/metrics") return Route::Metrics;
  if (path == "/tokenize") return Route::Tokenize;
  if (path == "/detokenize") return Route::Detokenize;
  if (path == "/apply-template") return Route::ApplyTemplate;
  return Route::Other;
}

const char* route_label(Route r) {
  switch (r) {
    case Route::ChatCompletions: return "chat_completions";
    case Route::Completions: return "completions";
    case Route::Messages: return "messages";
    case Route::CountTokens: return "count_tokens";
    case Route::Responses: return "responses";
    case Route::Response: return "response";
    case Route::Models: return "models";
    case Route::Model: return "model";
    case Route::Health: return "health";
    case Route::Metrics: return "metrics";
    case Route::Tokenize: return "tokenize";
    case Route::Detokenize: return "detokenize";
    case Route::ApplyTemplate: return "apply_template";
    case Route::Connection: return "connection";
    case Route::Other: break;
  }
  return "other";
}

const char* route_path(Route r) {
  switch (r) {
    case Route::ChatCompletions: return "/v1/chat/completions";
    case Route::Completions: return "/v1/completions";
    case Route::Messages: return "/v1/messages";
    case Route::CountTokens: return "/v1/messages/count_tokens";
    case Route::Responses: return "/v1/responses";
    default: return "-";
  }
}

void Metrics::count_ignored(Route route, const std::string& field) {
  std::lock_guard lk(mu_);
  ++ignored_[{route, field}];
}

void Metrics::count_dropped_tools(Route route, int64_t n) {
  std::lock_guard lk(mu_);
  dropped_tools_[route] += uint64_t(n);
}

void Metrics::count_request(Route route, int status) {
  std::lock_guard lk(mu_);
  ++requests_[{route, status}];
}

void Metrics::set_prefill_progress(int64_t done, int64_t total) {
  std::lock_guard<std::mutex> l(mu_);
  prefill_done_ = done;
  prefill_total_ = total;
}

void Metrics::add_prompt(int64_t tokens, int64_t reused, double prefill_seconds) {
  std::lock_guard lk(mu_);
  prompt_tokens_ += uint64_t(tokens);
  reused_tokens_ += uint64_t(reused);
  prefill_seconds_ += prefill_seconds;
}

void Metrics::add_token(double seconds) {
  std::lock_guard lk(mu_);
  ++generated_tokens_;
  decode_seconds_ += seconds;
  size_t b = 0;
  while (b < bucket_bounds_.size() && seconds > bucket_bounds_[b]) ++b;
  ++buckets_[b];
}

void Metrics::set_queue(std::function<int64_t()> waiting, std::function<int64_t()> running) {
  std::lock_guard lk(mu_);
  waiting_ = std::move(waiting);
  running_ = std::move(running);
}

void Metrics::set_prompt_cache(int64_t slots, uint64_t memory_bytes, int64_t files, uint64_t disk_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  cache_slots_ = slots;
  cache_memory_bytes_ = memory_bytes;
  cache_files_ = files;
  cache_disk_bytes_ = disk_bytes;
}

void Metrics::add_replayed(int64_t tokens) {
  std::lock_guard lk(mu_);
  ++replayed_requests_;
  replayed_tokens_ += uint64_t(tokens);
}

void Metrics::set_replay_store(int64_t replies, uint64_t bytes) {
  std::lock_guard lk(mu_);
  replay_replies_ = replies;
  replay_bytes_ = bytes;
}

void Metrics::set_prompt_checkpoints(int64_t count, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  cache_checkpoints_ = count;
  cache_checkpoint_bytes_ = bytes;
}

void Metrics::set_expert_stats(const ExpertStats& s) {
  std::lock_guard lk(mu_);
  experts_ = s;
}

void Metrics::add_speculation(const SpeculationStats& s) {
  std::lock_guard lk(mu_);
  spec_passes_ += uint64_t(s.passes);
  spec_proposed_ += uint64_t(s.proposed);
  spec_accepted_ += uint64_t(s.accepted);
  spec_plain_ += uint64_t(s.plain);
  spec_off_steps_ += uint64_t(s.off_steps);
  spec_probes_ += uint64_t(s.probes);
  spec_requests_off_ += s.gate_on ? 0 : 1;
  spec_pass_seconds_ += s.pass_seconds;
  spec_plain_seconds_ += s.plain_seconds;
  spec_watched_ += uint64_t(s.watched);
  spec_watched_accepted_ += uint64_t(s.watched_accepted);
  spec_gate_seconds_ += s.gate_seconds;
  spec_last_ = s;
}

void Metrics::add_batch_pass(int64_t sequences) {
  std::lock_guard lk(mu_);
  ++batch_passes_;
  batch_sequences_ += uint64_t(sequences);
  last_batch_ = sequences;
}

void Metrics::add_request_seconds(double s) {
  std::lock_guard lk(mu_);
  request_seconds_ += s;
  ++request_count_;
}

ServiceRates Metrics::service_rates() const {
  std::lock_guard lk(mu_);
  ServiceRates r;
  const uint64_t fed = prompt_tokens_ - std::min(reused_tokens_, prompt_tokens_);
  if (fed) r.prefill_seconds_per_token = prefill_seconds_ / double(fed);
  if (generated_tokens_) r.decode_seconds_per_token = decode_seconds_ / double(generated_tokens_);
  if (request_count_) {
    r.prompt_tokens_per_request = double(fed) / double(request_count_);
    r.completion_tokens_per_request = double(generated_tokens_) / double(request_count_);
  }
  return r;
}

std::string Metrics::render() const {
  std::lock_guard lk(mu_);
  std::string o;
  auto head = [&](const char* name, const char* type, const char* help) {
    o += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  // A metric with one sample and no labels.
  auto single = [&](const char* name, const char* type, const char* help, const auto& value) {
    head(name, type, help);
    o += fmt::format("{} {}\n", name, value);
  };
  head("sluice_requests_total", "counter",
       "HTTP requests answered, by endpoint (route template; 'connection': refused before a request was read) and "
       "status code.");
  for (const auto& [k, v] : requests_)
    o += fmt::format("sluice_requests_total{{endpoint=\"{}\",code=\"{}\"}} {}\n", route_label(k.first), k.second, v);
  head("sluice_ignored_fields_total", "counter",
       "Request fields accepted and ignored because they concern a provider feature this server does not have "
       "(prompt caching hints, service tiers, tool search...), by endpoint and field.");
  for (const auto& [k, v] : ignored_)
    o += fmt::format("sluice_ignored_fields_total{{endpoint=\"{}\",field=\"{}\"}} {}\n", route_label(k.first), k.second, v);
  head("sluice_dropped_tools_total", "counter",
       "Hosted or server tools (web search, code execution, MCP connectors...) left out of requests: this server "
       "cannot run them; the reply names them in its sluice-dropped-tools header.");
  for (const auto& [k, v] : dropped_tools_)
    o += fmt::format("sluice_dropped_tools_total{{endpoint=\"{}\"}} {}\n", route_label(k), v);
  single("sluice_prompt_tokens_total", "counter",
         "Prompt tokens of generation requests, including reused ones.", prompt_tokens_);
  single("sluice_prompt_tokens_reused_total", "counter",
         "Prompt tokens not prefilled again because the previous conversation's state was reused.", reused_tokens_);
  single("sluice_generation_tokens_total", "counter", "Tokens generated.", generated_tokens_);
  single("sluice_prefill_seconds_total", "counter", "Seconds spent prefilling prompts.", prefill_seconds_);
  single("sluice_prompt_cache_slots", "gauge",
         "Conversations kept in memory for prefix reuse, the running one included (at most --cache-slots).",
         cache_slots_);
  single("sluice_prompt_cache_memory_bytes", "gauge", "Bytes of the state of the conversations kept in memory.",
         cache_memory_bytes_);
  single("sluice_prompt_cache_files", "gauge", "Prompt state files in the --prompt-cache directory.", cache_files_);
  single("sluice_prompt_cache_disk_bytes", "gauge", "Bytes of the prompt state files (at most --prompt-cache-max).",
         cache_disk_bytes_);
  single("sluice_prompt_cache_checkpoints", "gauge",
         "States kept in memory at message boundaries (the end of a shared system prompt and tools, ...) for new sessions.",
         cache_checkpoints_);
  single("sluice_prompt_cache_checkpoint_bytes", "gauge",
         "Bytes of the checkpoints kept in memory (at most --prompt-checkpoints).", cache_checkpoint_bytes_);
  single("sluice_replayed_requests_total", "counter",
         "Generation requests whose prompt fed an earlier reply as generated (from the replay store) instead of its "
         "rendering as the client sent it back.",
         replayed_requests_);
  single("sluice_replayed_prompt_tokens_total", "counter",
         "Prompt tokens taken from the replay store: the earlier reply's prompt and its generated tokens.",
         replayed_tokens_);
  single("sluice_replay_store_replies", "gauge", "Generated replies kept for replay (--replay-max bounds their bytes).",
         replay_replies_);
  single("sluice_replay_store_bytes", "gauge", "Bytes of the replies kept for replay, with their prompts.", replay_bytes_);
  single("sluice_prefill_progress_tokens", "gauge", "Prompt positions in the state of the prompt being prefilled now.",
         prefill_done_);
  single("sluice_prefill_prompt_tokens", "gauge", "Length of the prompt being prefilled now (0: none).", prefill_total_);
  head("sluice_time_per_output_token_seconds", "histogram", "Seconds per generated token (sampling and forward pass).");
  uint64_t cum = 0;
  for (size_t b = 0; b < bucket_bounds_.size(); ++b) {
    cum += buckets_[b];
    o += fmt::format("sluice_time_per_output_token_seconds_bucket{{le=\"{}\"}} {}\n", bucket_bounds_[b], cum);
  }
  cum += buckets_.back();
  o += fmt::format("sluice_time_per_output_token_seconds_bucket{{le=\"+Inf\"}} {}\n", cum);
  o += fmt::format("sluice_time_per_output_token_seconds_sum {}\n", decode_seconds_);
  o += fmt::format("sluice_time_per_output_token_seconds_count {}\n", cum);
  single("sluice_speculation_passes_total", "counter",
         "Forward passes that verified a draft (with --speculate; plain decoding steps are not counted).",
         spec_passes_);
  single("sluice_speculation_draft_tokens_total", "counter", "Draft tokens proposed for verification.", spec_proposed_);
  single("sluice_speculation_accepted_tokens_total", "counter",
         "Draft tokens the model chose itself, so emitted without a pass of their own.", spec_accepted_);
  single("sluice_speculation_plain_steps_total", "counter",
         "One-token forward passes of speculating requests (no draft, or the gate had drafting off).", spec_plain_);
  single("sluice_speculation_gate_off_steps_total", "counter",
         "Plain steps taken because the gate found that drafts did not pay (acceptance against pass cost).",
         spec_off_steps_);
  single("sluice_speculation_gate_probes_total", "counter", "Short drafts the gate tried after a pause.", spec_probes_);
  single("sluice_speculation_gate_watched_drafts_total", "counter",
         "Lookup drafts (n-gram, suffix) the gate checked against the plain tokens while drafting was paused.",
         spec_watched_);
  single("sluice_speculation_gate_watched_accepted_tokens_total", "counter",
         "Tokens of watched drafts that plain decoding picked too.", spec_watched_accepted_);
  single("sluice_speculation_gate_seconds_total", "counter",
         "Seconds the gate took itself: asking for watched drafts and its bookkeeping.", spec_gate_seconds_);
  single("sluice_speculation_gate_off_requests_total", "counter",
         "Requests that ended with the gate off (drafting paused).", spec_requests_off_);
  single("sluice_speculation_pass_seconds_total", "counter", "Seconds in verification passes, drafting included.",
         spec_pass_seconds_);
  single("sluice_speculation_plain_seconds_total", "counter", "Seconds in plain steps of speculating requests.",
         spec_plain_seconds_);
  single("sluice_speculation_gate_on", "gauge", "1 when the last request ended with drafting on, 0 when paused.",
         spec_last_.gate_on ? 1 : 0);
  single("sluice_speculation_gate_acceptance", "gauge",
         "The gate's estimate at the end of the last request: the chance a draft token is accepted after an accepted "
         "one.",
         spec_last_.gate_acceptance);
  single("sluice_speculation_gate_draft_cost", "gauge",
         "The gate's measure at the end of the last request: a drafted token's cost in a verification pass, in "
         "plain steps.",
         spec_last_.gate_draft_cost);
  single("sluice_suffix_index_tokens", "gauge", "Tokens in the suffix drafter's index (--draft suffix).",
         spec_last_.index.tokens);
  single("sluice_suffix_index_documents", "gauge", "Documents (request segments) in the suffix drafter's index.",
         spec_last_.index.documents);
  single("sluice_suffix_index_bytes", "gauge", "Bytes the suffix drafter's index holds (bounded by --suffix-tokens).",
         spec_last_.index.bytes);
  single("sluice_expert_bytes_needed_total", "counter",
         "Bytes of routed experts the forward passes used, from the cache or storage (with --ram).",
         experts_.bytes_needed);
  single("sluice_expert_requests_total", "counter",
         "Routed experts the routers asked for (with --ram; 0 when all experts are in memory).",
         experts_.requests);
  single("sluice_expert_cache_hits_total", "counter",
         "Routed experts that were already in the expert cache when asked for.", experts_.hits);
  single("sluice_expert_cache_hit_ratio", "gauge",
         "sluice_expert_cache_hits_total / sluice_expert_requests_total (0 before any).",
         experts_.requests ? double(experts_.hits) / double(experts_.requests) : 0.0);
  single("sluice_expert_bytes_read_total", "counter",
         "Bytes of routed experts read from storage.", experts_.bytes_read);
  single("sluice_expert_stall_seconds_total", "counter",
         "Seconds generation waited for expert reads.", experts_.stall_seconds);
  single("sluice_expert_device_hits_total", "counter",
         "Routed experts found in the VRAM expert cache (with --device cuda; 0 on the CPU).", experts_.device_hits);
  single("sluice_expert_device_bytes_copied_total", "counter",
         "Bytes of routed experts copied from host memory over PCIe into the VRAM expert cache (with --device cuda).",
         experts_.device_bytes_copied);
  single("sluice_expert_host_calls_total", "counter",
         "Routed expert calls (an expert over its rows in one pass) computed on the host beside a GPU "
         "(--experts-on cpu|auto).",
         experts_.host_expert_calls);
  single("sluice_expert_device_calls_total", "counter",
         "Routed expert calls computed on the GPU while the host computes others (--experts-on cpu|auto).",
         experts_.device_expert_calls);
  single("sluice_expert_device_copy_seconds_total", "counter",
         "Seconds generation waited for those copies to the GPU.", experts_.device_copy_seconds);
  single("sluice_queue_waiting", "gauge", "Generation requests waiting for their turn.", waiting_ ? waiting_() : 0);
  single("sluice_queue_running", "gauge", "Generation requests running (at most --parallel).",
         running_ ? running_() : 0);
  single("sluice_batch_passes_total", "counter",
         "Decode passes of the batch scheduler, several requests' tokens in one pass (--parallel > 1).", batch_passes_);
  single("sluice_batch_sequences_total", "counter",
         "Requests' tokens decoded in those passes (divided by sluice_batch_passes_total: the mean batch size).",
         batch_sequences_);
  single("sluice_batch_size", "gauge", "Requests decoded together in the last batched pass.", last_batch_);
  return o;
}

}  // namespace sluice::server
