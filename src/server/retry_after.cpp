#include "server/retry_after.h"

#include <algorithm>
#include <cmath>

namespace sluice::server {

int64_t retry_after_seconds(int64_t ahead, const ServiceRates& r, int64_t parallel) {
  const double per_request = r.prompt_tokens_per_request * r.prefill_seconds_per_token +
                             r.completion_tokens_per_request * r.decode_seconds_per_token;
  // A slot frees when one of the first `parallel` ahead ends; those behind them go `parallel` at a time.
  const double rounds = std::ceil(double(std::max<int64_t>(ahead, 0)) / double(std::max<int64_t>(parallel, 1)));
  const double s = rounds * per_request;
  if (!std::isfinite(s) || s >= double(kMaxRetryAfterSeconds)) return kMaxRetryAfterSeconds;
  return std::max<int64_t>(1, int64_t(std::ceil(s)));
}

}  // namespace sluice::server
