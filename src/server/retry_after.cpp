#include "server/retry_after.h"

#include <algorithm>
#include <cmath>

namespace sluice::server {

int64_t retry_after_seconds(int64_t ahead, const ServiceRates& r) {
  const double per_request = r.prompt_tokens_per_request * r.prefill_seconds_per_token +
                             r.completion_tokens_per_request * r.decode_seconds_per_token;
  const double s = double(std::max<int64_t>(ahead, 0)) * per_request;
  if (!std::isfinite(s) || s >= double(kMaxRetryAfterSeconds)) return kMaxRetryAfterSeconds;
  return std::max<int64_t>(1, int64_t(std::ceil(s)));
}

}  // namespace sluice::server
