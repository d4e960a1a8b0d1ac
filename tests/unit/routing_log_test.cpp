// Routing statistics from a known log: the histogram counts every pick, reuse
// and reuse distance follow their definitions, and an LRU simulation of a
// given size gets the hits worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "experts/routing_log.h"
#include "util/error.h"

namespace sluice::routing_log_test {
namespace {

TEST(RoutingLog, LayerStatisticsByHand) {
  // Four experts, two picks per token: {0,1} {1,2} {0,1} {2,3}
  const std::vector<std::vector<int32_t>> steps = {{0, 1}, {1, 2}, {0, 1}, {2, 3}};
  const LayerRouting r = layer_routing(5, 4, steps, {1, 2, 3});
  EXPECT_EQ(r.layer, 5);
  EXPECT_EQ(r.histogram, (std::vector<int64_t>{2, 3, 2, 1}));
  EXPECT_DOUBLE_EQ(r.max_over_mean, 3 / 2.0);
  EXPECT_DOUBLE_EQ(r.min_over_mean, 1 / 2.0);
  // Picks after the first token: 6, of which 1 at t=1 and 1 at t=2 were picked just before.
  EXPECT_DOUBLE_EQ(r.consecutive_reuse, 2 / 6.0);
  EXPECT_DOUBLE_EQ(r.uniform_consecutive_reuse, 2 / 4.0);
  // Re-picks: 1 at t=1 (1), 0 at t=2 (2), 1 at t=2 (1), 2 at t=3 (2): mean 1.5.
  EXPECT_DOUBLE_EQ(r.mean_reuse_distance, 1.5);
  double h = 0;
  for (double c : {2.0, 3.0, 2.0, 1.0}) h -= c / 8 * std::log(c / 8);
  EXPECT_NEAR(r.normalized_entropy, h / std::log(4.0), 1e-12);
  // Picks in order: 0,1,1,2,0,1,2,3. LRU of 1 or 2 hits only the repeated 1; LRU of 3 also
  // hits 0, 1 and 2 the second time.
  EXPECT_EQ(r.lru_hit_rate, (std::vector<double>{1 / 8.0, 1 / 8.0, 4 / 8.0}));
}

TEST(RoutingLog, ReportGroupsStepsByLayer) {
  RoutingLog log;
  log.steps = {{1, {0, 2}}, {3, {1, 2}}, {1, {2, 3}}, {3, {1, 2}}};
  const auto report = routing_report(log, {0, 4, 0, 3}, {2});
  ASSERT_EQ(report.size(), 2u);
  EXPECT_EQ(report[0].layer, 1);
  EXPECT_EQ(report[0].histogram, (std::vector<int64_t>{1, 0, 2, 1}));
  EXPECT_EQ(report[1].layer, 3);
  EXPECT_EQ(report[1].experts, 3);
  EXPECT_DOUBLE_EQ(report[1].consecutive_reuse, 1.0);
  RoutingLog bad;
  bad.steps = {{0, {0}}};
  EXPECT_THROW(routing_report(bad, {0, 4}, {}), Error);  // layer 0 has no experts
  bad.steps = {{1, {7}}};
  EXPECT_THROW(routing_report(bad, {0, 4}, {}), Error);  // expert out of range
}

}  // namespace
}  // namespace sluice::routing_log_test
