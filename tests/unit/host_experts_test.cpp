// Experts computed on the host beside the pass's backend (compute/host_experts.h):
// the MoE block brings a host expert's rows to the host, computes it there, and
// puts its outputs back into the packed rows before the weighted sum. Here both
// sides are the CPU's kernels (a second CPU backend object plays the host), so
// whatever the split, the logits must be bit for bit the plain run's: a row
// put back in the wrong place, a missed expert or a sum in another order shows.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "compute/cpu/cpu_backend.h"
#include "compute/host_experts.h"
#include "engine/engine.h"
#include "support/golden_logits.h"
#include "support/test_support.h"

namespace sluice::host_experts_test {
namespace {

using test::golden_ids;
const auto run = test::prefill_half_then_decode;

// The resident table, with the experts of even id said to be in the device's memory.
class EvenOnDevice : public ExpertSource {
 public:
  explicit EvenOnDevice(ExpertSource& inner) : inner_(inner) {}
  void request(int32_t l, const int32_t* e, int64_t n) override { inner_.request(l, e, n); }
  bool ready(int32_t l, int32_t e) override { return inner_.ready(l, e); }
  const ExpertWeights& acquire(int32_t l, int32_t e) override { return inner_.acquire(l, e); }
  void release(int32_t l, int32_t e) override { inner_.release(l, e); }
  ExpertStats stats() const override { return inner_.stats(); }
  bool on_device(int32_t, int32_t e) const override { return e % 2 == 0; }

 private:
  ExpertSource& inner_;
};

class HostExpertsGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(HostExpertsGolden, AnySplitGivesThePlainRunsBits) {
  const std::string dir = test::fixture("golden/" + GetParam());
  const auto ids = golden_ids(GetParam());
  const auto want = run(*load_model(dir), ids);
  CpuBackend host_backend;
  struct Case {
    const char* what;
    int64_t max_rows;
    bool even_on_device, stream;
  };
  for (const Case c : {Case{"every expert on the host", std::numeric_limits<int64_t>::max(), false, false},
                       Case{"experts with fewer than 3 rows on the host", 3, false, false},
                       Case{"odd experts with fewer than 3 rows on the host", 3, true, false},
                       Case{"streamed experts on the host", std::numeric_limits<int64_t>::max(), false, true},
                       Case{"streamed experts with 1 row on the host", 2, false, true}}) {
    LoadOptions o;
    if (c.stream) {
      o.stream_experts = true;
      o.streaming.cache_bytes = uint64_t(200) << 10;  // a handful of experts: reads while computing
    }
    auto m = load_model(dir, o);
    if (c.even_on_device) m->set_expert_source(std::make_unique<EvenOnDevice>(m->experts()));
    auto host = std::make_shared<HostExperts>();
    host->backend = &host_backend;
    host->max_rows = c.max_rows;
    m->set_host_experts(host);
    const auto got = run(*m, ids);
    ASSERT_EQ(got.size(), want.size()) << c.what;
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << c.what;
    EXPECT_GT(host->host_calls, 0u) << c.what;
    EXPECT_GT(host->host_seconds, 0.0) << c.what;
    if (c.max_rows < 100 || c.even_on_device) {
      EXPECT_GT(host->device_calls, 0u) << c.what;  // a split, not everything on one side
    } else {
      EXPECT_EQ(host->device_calls, 0u) << c.what;
    }
    const ExpertStats st = m->expert_stats();
    EXPECT_EQ(st.host_expert_calls, host->host_calls) << c.what;
    EXPECT_EQ(st.device_expert_calls, host->device_calls) << c.what;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, HostExpertsGolden,
                         ::testing::Values("deepseek_v3_tiny_fp8", "deepseek_v3_tiny_int4", "qwen3_moe_tiny",
                                           "gpt_oss_tiny", "kimi_k3_tiny"));

TEST(HostExperts, OnHostWhenFewRowsAndNotOnTheDevice) {
  HostExperts h;
  h.max_rows = 4;
  ExpertTable none;
  EXPECT_TRUE(h.on_host(none, 0, 1, 3));
  EXPECT_FALSE(h.on_host(none, 0, 1, 4));
  ExpertTable table;
  EvenOnDevice even(table);
  EXPECT_FALSE(h.on_host(even, 2, 6, 1));
  EXPECT_TRUE(h.on_host(even, 2, 7, 1));
}

// compute/host_experts.h host_expert_max_rows: 1 GB copied at 50 GB/s takes 0.02 s.
const std::vector<std::pair<int64_t, double>> kHost = {{1, 0.01}, {2, 0.015}, {4, 0.05}, {8, 0.09}, {16, 0.2}};
constexpr uint64_t kGB = 1'000'000'000;

TEST(HostExperts, MaxRowsIsTheFirstMeasuredCountTheCopyWins) {
  EXPECT_EQ(host_expert_max_rows(kHost, kGB, 50, 1.0), 4);   // 0.05 s > 0.02 s from 4 rows
  EXPECT_EQ(host_expert_max_rows(kHost, kGB, 10, 1.0), 16);  // copy 0.1 s
  EXPECT_EQ(host_expert_max_rows(kHost, kGB, 2 * 10, 1.0), 8);  // copy 0.05 s: 0.05 at 4 rows is not slower
}

TEST(HostExperts, MaxRowsFasterAtOneRowOnly) {
  // Copy 0.0125 s: the host's 0.01 s at 1 row wins, its 0.015 s at 2 rows loses: one row on the host.
  EXPECT_EQ(host_expert_max_rows(kHost, kGB, 80, 1.0), 2);
}

TEST(HostExperts, MaxRowsHostNeverFaster) {
  EXPECT_EQ(host_expert_max_rows(kHost, kGB, 200, 1.0), 1);  // copy 0.005 s
  // The margin turns a host that is faster alone into one that is not: 0.01 x 1.5 > 0.0125.
  EXPECT_EQ(host_expert_max_rows(kHost, kGB, 80, 1.5), 1);
}

TEST(HostExperts, MaxRowsHostAlwaysFasterStopsPastTheLastCount) {
  // Faster at every count measured: one past the last (nothing is known beyond 16 rows).
  EXPECT_EQ(host_expert_max_rows(kHost, kGB, 1, 1.0), 17);
  EXPECT_EQ(host_expert_max_rows(kHost, kGB, 1, 1.5), 17);
}

TEST(HostExperts, MaxRowsUnusableInputsPutNothingOnTheHost) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(host_expert_max_rows(kHost, kGB, 0, 1.0), 1);    // no copy rate (no GPU, pinning failed)
  EXPECT_EQ(host_expert_max_rows(kHost, kGB, -5, 1.0), 1);
  EXPECT_EQ(host_expert_max_rows(kHost, kGB, nan, 1.0), 1);
  EXPECT_EQ(host_expert_max_rows(kHost, kGB, inf, 1.0), 1);
  EXPECT_EQ(host_expert_max_rows(kHost, kGB, 1, nan), 1);    // margin
  EXPECT_EQ(host_expert_max_rows(kHost, kGB, 1, 0), 1);
  EXPECT_EQ(host_expert_max_rows(kHost, 0, 1, 1.0), 1);      // no bytes
  EXPECT_EQ(host_expert_max_rows({}, kGB, 1, 1.0), 1);       // nothing timed
  EXPECT_EQ(host_expert_max_rows({{2, 0.01}, {4, 0.02}}, kGB, 1, 1.0), 1);  // one row not timed
  // A time that is not a positive number: the copy wins from that count.
  EXPECT_EQ(host_expert_max_rows({{1, 0.01}, {2, nan}, {4, 0.02}}, kGB, 1, 1.0), 2);
  EXPECT_EQ(host_expert_max_rows({{1, 0.0}, {2, 0.01}}, kGB, 1, 1.0), 1);
  EXPECT_EQ(host_expert_max_rows({{1, inf}, {2, 0.01}}, kGB, 1, 1.0), 1);
}

}  // namespace
}  // namespace sluice::host_experts_test
