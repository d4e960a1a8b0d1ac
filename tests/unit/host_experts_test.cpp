// Experts computed on the host beside the pass's backend (compute/host_experts.h):
// the MoE block brings a host expert's rows to the host, computes it there, and
// puts its outputs back into the packed rows before the weighted sum. Here both
// sides are the CPU's kernels (a second CPU backend object plays the host), so
// whatever the split, the logits must be bit for bit the plain run's: a row
// put back in the wrong place, a missed expert or a sum in another order shows.
#include <gtest/gtest.h>

#include <memory>

#include "compute/cpu/cpu_backend.h"
#include "compute/host_experts.h"
#include "engine/engine.h"
#include "support/golden_logits.h"
#include "support/test_support.h"

namespace sluice {
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

TEST(HostExperts, CopyWinsFromTheFirstRowCountTheHostIsSlower) {
  const std::vector<std::pair<int64_t, double>> host = {{1, 0.01}, {4, 0.05}, {16, 0.2}};
  const uint64_t bytes = 1'000'000'000;  // 1 GB: 0.02 s at 50 GB/s
  EXPECT_EQ(rows_where_copy_wins(host, bytes, 50), 4);
  EXPECT_EQ(rows_where_copy_wins(host, bytes, 200), 1);   // 0.005 s: even one row is slower on the host
  EXPECT_EQ(rows_where_copy_wins(host, bytes, 10), 16);   // 0.1 s
  EXPECT_EQ(rows_where_copy_wins(host, bytes, 1), 0);     // 1 s: the host is faster at every count
  EXPECT_EQ(rows_where_copy_wins(host, bytes, 0), 0);     // no copy rate (no GPU)
}

}  // namespace
}  // namespace sluice
