// Retry-After for a full queue: estimated from the measured time per token and
// the requests ahead, growing with the queue and bounded.
#include <gtest/gtest.h>

#include "server/metrics.h"
#include "server/retry_after.h"

namespace sluice::server::server_retry_after_test {
namespace {

TEST(RetryAfter, GrowsWithTheQueueAndIsBounded) {
  // 32 prompt tokens at 1/64 s and 16 generated tokens at 1/16 s: 1.5 s per request.
  const ServiceRates r{1.0 / 64, 1.0 / 16, 32, 16};
  EXPECT_EQ(retry_after_seconds(1, r), 2);
  EXPECT_EQ(retry_after_seconds(5, r), 8);
  EXPECT_EQ(retry_after_seconds(16, r), 24);
  EXPECT_EQ(retry_after_seconds(40, r), kMaxRetryAfterSeconds);
  int64_t last = 0;
  for (int64_t ahead = 0; ahead < 200; ++ahead) {
    const int64_t s = retry_after_seconds(ahead, r);
    EXPECT_GE(s, last);
    EXPECT_GE(s, 1);
    EXPECT_LE(s, kMaxRetryAfterSeconds);
    last = s;
  }
  EXPECT_EQ(last, kMaxRetryAfterSeconds);
  EXPECT_EQ(retry_after_seconds(3, ServiceRates{}), 1);  // nothing measured yet
  EXPECT_EQ(retry_after_seconds(1, ServiceRates{1e300, 1e300, 1e300, 1e300}), kMaxRetryAfterSeconds);
}

// With --parallel N the requests ahead are served N at a time.
TEST(RetryAfter, ParallelSlotsShareTheWait) {
  const ServiceRates r{1.0 / 64, 1.0 / 16, 32, 16};  // 1.5 s per request
  EXPECT_EQ(retry_after_seconds(4, r, 4), 2);   // one round
  EXPECT_EQ(retry_after_seconds(5, r, 4), 3);   // two rounds
  EXPECT_EQ(retry_after_seconds(16, r, 4), 6);  // four rounds (24 s one at a time)
  EXPECT_EQ(retry_after_seconds(16, r, 1), retry_after_seconds(16, r));
}

TEST(RetryAfter, RatesComeFromWhatTheServerMeasured) {
  Metrics m;
  m.add_prompt(100, 60, 0.4);  // 40 tokens fed in 0.4 s (60 reused)
  for (int i = 0; i < 20; ++i) m.add_token(0.05);
  m.add_request_seconds(1.4);
  m.add_prompt(40, 0, 0.4);
  m.add_request_seconds(0.4);
  const ServiceRates r = m.service_rates();
  EXPECT_DOUBLE_EQ(r.prefill_seconds_per_token, 0.01);
  EXPECT_DOUBLE_EQ(r.decode_seconds_per_token, 0.05);
  EXPECT_DOUBLE_EQ(r.prompt_tokens_per_request, 40);
  EXPECT_DOUBLE_EQ(r.completion_tokens_per_request, 10);
  EXPECT_EQ(retry_after_seconds(4, r), 4);  // 4 x (0.4 + 0.5) = 3.6 s
}

}  // namespace
}  // namespace sluice::server::server_retry_after_test
