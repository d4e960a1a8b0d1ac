// The routing statistics a benchmark reports (experts/routing_stats.h), on routes
// made by hand with every value worked out from the definitions.
#include <gtest/gtest.h>

#include "experts/routing_stats.h"
#include "util/error.h"

namespace sluice::routing_stats_test {
namespace {

TEST(RoutingStats, HandMadeRoutes) {
  RoutingLog log;
  // Four tokens, MoE layers 1 and 2 (four experts each, two picks per token),
  // logged in the order a model makes them: token by token, layer by layer.
  const std::vector<std::vector<int32_t>> l1 = {{0, 1}, {1, 2}, {0, 1}, {0, 1}};
  const std::vector<std::vector<int32_t>> l2 = {{2, 3}, {0, 3}, {2, 3}, {2, 3}};
  for (size_t t = 0; t < 4; ++t) {
    log.steps.push_back({1, l1[t]});
    log.steps.push_back({2, l2[t]});
  }
  const RoutingStats s = routing_stats(log, {0, 4, 4});
  EXPECT_EQ(s.tokens, 4);
  EXPECT_EQ(s.layers, 2);
  // Repeats from the token before: layer 1 has 1 + 1 + 2, layer 2 1 + 1 + 2, of 6 + 6 picks.
  EXPECT_DOUBLE_EQ(s.prev_token_overlap, 8 / 12.0);
  // ceil(30% of 4) = 2 hottest: layer 1 uses (3, 4, 1, 0), layer 2 (1, 0, 3, 4): 7 + 7 of 16.
  EXPECT_DOUBLE_EQ(s.hottest_30pct_share, 14 / 16.0);
  // Fewer than 100 tokens: one window of all 4; three distinct experts in each layer.
  EXPECT_EQ(s.window_tokens, 4);
  EXPECT_DOUBLE_EQ(s.distinct_per_100_tokens, 3.0);
  // Co-occurrence guesses of layer 2: token 0 has no history (0 of 2); token 1 ({1,2})
  // scores experts 2 and 3 once each (guess {2,3}: 1 right); tokens 2 and 3 ({0,1}) guess
  // {3,2} from the counts (2 right each): 5 of 8.
  ASSERT_EQ(s.next_layer_predictable_per_layer.size(), 1u);
  EXPECT_DOUBLE_EQ(s.next_layer_predictable, 5 / 8.0);
  EXPECT_DOUBLE_EQ(s.next_layer_predictable_per_layer[0], 5 / 8.0);
  const auto j = s.to_json();
  for (const char* k : {"prev_token_overlap", "distinct_per_100_tokens", "next_layer_predictable", "hottest_30pct_share"})
    EXPECT_TRUE(j.contains(k)) << k;
}

TEST(RoutingStats, DistinctCountsFullWindowsOfAHundredTokens) {
  RoutingLog log;
  // One pick per token, expert t / 2: each full window of 100 tokens sees 50 experts;
  // the last 50 tokens make no full window and are left out.
  for (int32_t t = 0; t < 250; ++t) log.steps.push_back({0, {t / 2}});
  const RoutingStats s = routing_stats(log, {200});
  EXPECT_EQ(s.window_tokens, 100);
  EXPECT_DOUBLE_EQ(s.distinct_per_100_tokens, 50.0);
  EXPECT_DOUBLE_EQ(s.prev_token_overlap, 125 / 249.0);  // the odd tokens 1..249 repeat their predecessor
  EXPECT_TRUE(s.next_layer_predictable_per_layer.empty());
}

TEST(RoutingStats, RejectsRoutesOutsideTheModel) {
  RoutingLog bad;
  bad.steps = {{0, {0}}};
  EXPECT_THROW(routing_stats(bad, {0, 4}), Error);  // layer 0 has no experts
  bad.steps = {{1, {4}}};
  EXPECT_THROW(routing_stats(bad, {0, 4}), Error);  // expert out of range
  EXPECT_EQ(routing_stats(RoutingLog{}, {4}).tokens, 0);
}

}  // namespace
}  // namespace sluice::routing_stats_test
