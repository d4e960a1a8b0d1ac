// sluice routing-report counts every routed pick: per layer the histogram sums
// to tokens x top-k, and reuse statistics lie in their ranges.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace sluice::routing_report_test {
namespace {

TEST(RoutingReport, HistogramsCountEveryPick) {
  test::TempDir tmp;
  auto r = test::run_sluice({"routing-report", "--model", test::fixture("../../models/sluice-k3-mini"), "--tokens-from",
                             test::fixture("golden/sluice_k3_mini_reference.safetensors") + ":input_ids", "--json",
                             tmp.file("r.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(std::ifstream(tmp.file("r.json")));
  ASSERT_EQ(j["layers"].size(), 7u);  // layers 1..7 are MoE
  const int64_t tokens = j["tokens"].get<int64_t>();
  for (const auto& l : j["layers"]) {
    int64_t sum = 0;
    for (auto h : l["histogram"]) sum += h.get<int64_t>();
    EXPECT_EQ(sum, tokens * 4);
    EXPECT_GT(l["normalized_entropy"].get<double>(), 0.0);
    EXPECT_LE(l["normalized_entropy"].get<double>(), 1.0);
    EXPECT_GE(l["consecutive_reuse"].get<double>(), 0.0);
    EXPECT_LE(l["consecutive_reuse"].get<double>(), 1.0);
  }
}

}  // namespace
}  // namespace sluice::routing_report_test
