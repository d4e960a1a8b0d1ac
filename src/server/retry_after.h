// The Retry-After of a 429 (queue full): how long until a request refused now
// could start, from what the server measured: each request ahead (the running
// one and those waiting) is taken to cost a mean request's prompt tokens at the
// measured prefill time per token plus its generated tokens at the measured
// decode time per token. Bounded, so a slow start (or one huge request) never
// tells clients to stay away for minutes.
#pragma once
#include <cstdint>

namespace sluice::server {

struct ServiceRates {
  double prefill_seconds_per_token = 0;  // per prompt token fed (reused ones cost nothing)
  double decode_seconds_per_token = 0;   // per generated token
  double prompt_tokens_per_request = 0;  // fed per request, on average
  double completion_tokens_per_request = 0;
};

constexpr int64_t kMaxRetryAfterSeconds = 60;

// `ahead`: requests that start before a new one (running + waiting), served
// `parallel` at a time (--parallel: decoded together, each at the measured
// time per token). At least 1 s, at most kMaxRetryAfterSeconds.
int64_t retry_after_seconds(int64_t ahead, const ServiceRates& r, int64_t parallel = 1);

}  // namespace sluice::server
