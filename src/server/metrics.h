// Server counters, rendered in the Prometheus text exposition format.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "chat/generation_counters.h"
#include "compute/expert_source.h"
#include "server/retry_after.h"

namespace sluice::server {

// The route a request was for, by template: metric labels come only from this
// fixed set (never from the request's path, which a client chooses).
enum class Route { ChatCompletions, Completions, Messages, CountTokens, Responses, Response, Models, Model, Health, Metrics, Tokenize, Detokenize, ApplyTemplate, Other, Connection };
Route route_of(const std::string& path);
const char* route_label(Route r);
const char* route_path(Route r);  // "/v1/chat/completions", ... ("-" for none)

// Also the conversation layer's counters (chat::GenerationCounters).
class Metrics : public chat::GenerationCounters {
 public:
  Metrics();
  void count_request(Route route, int status);
  // A request field about a provider feature this server does not have, accepted and ignored
  // (`field` comes from the parsers' fixed lists, never from the request).
  void count_ignored(Route route, const std::string& field);
  void count_dropped_tools(Route route, int64_t n);  // hosted tools not offered to the model
  void add_prompt(int64_t tokens, int64_t reused, double prefill_seconds) override;
  void add_token(double seconds) override;  // one generated token and the time it took
  // The prompt being prefilled now: positions in the state of `total` (0, 0: none).
  void set_prefill_progress(int64_t done, int64_t total) override;
  void set_queue(std::function<int64_t()> waiting, std::function<int64_t()> running);
  std::string render() const;
  // Measured time per prompt and generated token and tokens per request, for Retry-After.
  ServiceRates service_rates() const;
  void add_request_seconds(double s);
  // The routed-expert source's counters, as of the generation thread's last snapshot.
  void set_expert_stats(const ExpertStats& s) override;
  // One request's speculation: verification passes, draft tokens proposed and accepted.
  void add_speculation(const SpeculationStats& s) override;
  void set_prompt_cache(int64_t slots, uint64_t memory_bytes, int64_t files, uint64_t disk_bytes) override;
  void set_prompt_checkpoints(int64_t count, uint64_t bytes) override;
  // A request whose prompt took `tokens` from the replay store (chat/reply_replay.h).
  void add_replayed(int64_t tokens);
  // The replay store: replies kept and their bytes.
  void set_replay_store(int64_t replies, uint64_t bytes);
  // One decode pass of the batch scheduler (--parallel > 1) over `sequences` requests.
  void add_batch_pass(int64_t sequences) override;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<Route, int>, uint64_t> requests_;
  std::map<std::pair<Route, std::string>, uint64_t> ignored_;
  std::map<Route, uint64_t> dropped_tools_;
  uint64_t prompt_tokens_ = 0, reused_tokens_ = 0, generated_tokens_ = 0;
  double prefill_seconds_ = 0, decode_seconds_ = 0;
  std::vector<double> bucket_bounds_;
  std::vector<uint64_t> buckets_;  // cumulative counts are computed when rendering
  uint64_t spec_passes_ = 0, spec_proposed_ = 0, spec_accepted_ = 0, spec_plain_ = 0, spec_off_steps_ = 0,
           spec_probes_ = 0, spec_requests_off_ = 0, spec_watched_ = 0, spec_watched_accepted_ = 0;
  double spec_pass_seconds_ = 0, spec_plain_seconds_ = 0, spec_gate_seconds_ = 0;
  SpeculationStats spec_last_;  // the last request's (its gate at the end, the drafter's index)
  uint64_t batch_passes_ = 0, batch_sequences_ = 0;
  int64_t last_batch_ = 0;
  double request_seconds_ = 0;
  int64_t prefill_done_ = 0, prefill_total_ = 0;
  uint64_t request_count_ = 0;
  std::function<int64_t()> waiting_, running_;
  ExpertStats experts_;
  int64_t cache_slots_ = 0, cache_files_ = 0, cache_checkpoints_ = 0;
  uint64_t replayed_requests_ = 0, replayed_tokens_ = 0, replay_bytes_ = 0;
  int64_t replay_replies_ = 0;
  uint64_t cache_memory_bytes_ = 0, cache_disk_bytes_ = 0, cache_checkpoint_bytes_ = 0;
};

}  // namespace sluice::server
