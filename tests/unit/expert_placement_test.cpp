// engine/expert_placement.h: where --experts-on puts the routed experts beside a
// GPU, and the measurement auto decides from (compute/host_expert_timing.h).
// The GPU side cannot run here: the decision is a pure function of the measured
// inputs, tested with made-up ones, and the host's half of the measurement runs
// on the CPU backend as it does beside a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "compute/host_expert_timing.h"
#include "compute/host_experts.h"
#include "engine/engine.h"
#include "engine/expert_placement.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::expert_placement_test {
namespace {

// An expert of `bytes` timed on the host at 1, 2, 4, 8 and 16 rows (1 row: `one_row_s`, each doubling
// of the rows 1.6x the time), against a copy at `gbps`.
HostExpertMeasurement measured(double one_row_s, uint64_t bytes, double gbps) {
  HostExpertMeasurement m;
  m.format = "mxfp4";
  m.bytes = bytes;
  m.threads = 16;
  m.copy_gbps = gbps;
  m.seconds = 0.1;
  double s = one_row_s;
  for (const int64_t rows : {1, 2, 4, 8, 16}) {
    m.host_seconds.push_back({rows, s});
    s *= 1.6;
  }
  return m;
}

// The H100 host of issue 33: a Kimi-K2-shaped MXFP4 expert took 0.407 ms at one row on the host,
// 0.429 ms to copy at 54.5 GB/s. Alone the host is a little faster at one row; with the margin for
// its slowdown in the engine (0.62 ms per expert was measured in the decode) it is not.
const HostExpertMeasurement kH100 = measured(0.407e-3, uint64_t(0.429e-3 * 54.5e9), 54.5);

TEST(ExpertPlacement, HostNeverFasterInstallsGpusPlan) {
  const ExpertPlacement gpu = place_experts(ExpertsOn::Gpu, 0, nullptr);
  const ExpertPlacement autop = place_experts(ExpertsOn::Auto, 0, &kH100);
  ASSERT_EQ(host_expert_max_rows(kH100.host_seconds, kH100.bytes, kH100.copy_gbps, 1.0), 2);  // alone: faster at 1 row
  // What Engine::install takes from a placement: the side it runs as (cpu empties VRAM's expert cache),
  // whether the VRAM tier is the fixed set, and the host policy the MoE blocks ask.
  EXPECT_EQ(autop.asked, ExpertsOn::Auto);
  EXPECT_EQ(autop.runs, gpu.runs);
  EXPECT_EQ(autop.runs, ExpertsOn::Gpu);
  EXPECT_EQ(autop.vram_fixed(), gpu.vram_fixed());
  EXPECT_FALSE(autop.vram_fixed());
  EXPECT_EQ(autop.host_experts(cpu_backend()), nullptr);
  EXPECT_EQ(gpu.host_experts(cpu_backend()), nullptr);
  EXPECT_EQ(autop.host_max_rows, 0);
  const std::string line = autop.describe();
  EXPECT_NE(line.find("every expert on the GPU"), std::string::npos) << line;
  EXPECT_NE(line.find("54.5 GB/s"), std::string::npos) << line;
  EXPECT_NE(line.find("0.41 ms per 1-row mxfp4 expert"), std::string::npos) << line;
  EXPECT_NE(line.find("--host-expert-rows N"), std::string::npos) << line;
  EXPECT_TRUE(gpu.describe().empty());  // gpu and cpu choose nothing
}

TEST(ExpertPlacement, FasterHostKeepsTheFixedSetBelowTheMeasuredRows) {
  // Copy 1 ms; the host 0.2, 0.32, 0.512 (x1.5: 0.768) ms at 1, 2, 4 rows, 0.82 (x1.5: 1.23) at 8:
  // fewer than 8 rows on the host.
  const HostExpertMeasurement m = measured(0.2e-3, 50'000'000, 50);
  const ExpertPlacement p = place_experts(ExpertsOn::Auto, 0, &m);
  EXPECT_EQ(p.runs, ExpertsOn::Auto);
  EXPECT_TRUE(p.vram_fixed());
  EXPECT_EQ(p.host_max_rows, 8);
  const auto host = p.host_experts(cpu_backend());
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->max_rows, 8);
  EXPECT_EQ(host->backend, &cpu_backend());
  EXPECT_NE(p.describe().find("fewer than 8 rows"), std::string::npos) << p.describe();
  // Faster at every count: past the last one measured, no further.
  const HostExpertMeasurement fast = measured(0.01e-3, 50'000'000, 50);
  EXPECT_EQ(place_experts(ExpertsOn::Auto, 0, &fast).host_max_rows, 17);
}

TEST(ExpertPlacement, OneRowOnTheHost) {
  // Copy 1 ms; the host 0.6 ms at 1 row (x1.5: 0.9), 0.96 at 2 (x1.5: 1.44).
  const HostExpertMeasurement m = measured(0.6e-3, 50'000'000, 50);
  const ExpertPlacement p = place_experts(ExpertsOn::Auto, 0, &m);
  EXPECT_EQ(p.runs, ExpertsOn::Auto);
  EXPECT_EQ(p.host_max_rows, 2);
}

TEST(ExpertPlacement, GivenRowsAreNotMeasured) {
  const ExpertPlacement p = place_experts(ExpertsOn::Auto, 9, &kH100);
  EXPECT_EQ(p.runs, ExpertsOn::Auto);
  EXPECT_TRUE(p.rows_given);
  EXPECT_FALSE(p.measured.has_value());
  EXPECT_EQ(p.host_max_rows, 9);
  EXPECT_NE(p.describe().find("--host-expert-rows 9"), std::string::npos) << p.describe();
}

TEST(ExpertPlacement, ForcedSidesAndNothingMeasured) {
  const ExpertPlacement cpu = place_experts(ExpertsOn::Cpu, 0, &kH100);
  EXPECT_EQ(cpu.runs, ExpertsOn::Cpu);
  EXPECT_FALSE(cpu.vram_fixed());
  ASSERT_NE(cpu.host_experts(cpu_backend()), nullptr);
  EXPECT_EQ(cpu.host_experts(cpu_backend())->max_rows, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(place_experts(ExpertsOn::Gpu, 4, &kH100).runs, ExpertsOn::Gpu);
  // Auto with no measurement (no routed expert, no GPU): nothing is known to favour the host.
  EXPECT_EQ(place_experts(ExpertsOn::Auto, 0, nullptr).runs, ExpertsOn::Gpu);
  // A copy rate that could not be measured (pinning failed) is no ground for the host either.
  const HostExpertMeasurement no_rate = measured(0.01e-3, 50'000'000, 0);
  EXPECT_EQ(place_experts(ExpertsOn::Auto, 0, &no_rate).runs, ExpertsOn::Gpu);
}

TEST(ExpertPlacement, JsonHasTheMeasuredInputsAndTheChoice) {
  const nlohmann::json j = place_experts(ExpertsOn::Auto, 0, &kH100).to_json();
  EXPECT_EQ(j["experts_on"], "auto");
  EXPECT_EQ(j["runs_as"], "gpu");
  EXPECT_EQ(j["host_expert_rows"], 0);
  EXPECT_EQ(j["host_expert_rows_given"], false);
  EXPECT_EQ(j["measured"]["pinned_upload_gbps"], 54.5);
  EXPECT_EQ(j["measured"]["expert_bytes"], kH100.bytes);
  EXPECT_EQ(j["measured"]["margin"], kHostExpertMargin);
  ASSERT_EQ(j["measured"]["host_seconds"].size(), 5u);
  EXPECT_EQ(j["measured"]["host_seconds"][0]["rows"], 1);
  EXPECT_EQ(j["measured"]["host_seconds"][0]["seconds"], 0.407e-3);
  EXPECT_EQ(place_experts(ExpertsOn::Cpu, 0, nullptr).to_json()["runs_as"], "cpu");
}

TEST(ExpertPlacement, AutoMeasuredIsTheCommandsDefault) {
  MemoryRequest r;
  EXPECT_EQ(r.experts_on, "auto");
  const LoadOptions lo = load_options(MemoryPlan{}, r, "/nonexistent");
  EXPECT_EQ(lo.experts_on, ExpertsOn::Auto);
  EXPECT_EQ(lo.host_expert_rows, 0);
  EXPECT_NO_THROW(check_memory_request(r));
  r.host_expert_rows = -1;
  EXPECT_THROW(check_memory_request(r), Error);
}

TEST(ExpertPlacement, NoneOnTheCpu) {
  LoadOptions o;
  o.experts_on = ExpertsOn::Auto;
  EXPECT_EQ(load_model(test::fixture("golden/deepseek_v3_tiny_int4"), o)->expert_placement(), nullptr);
}

// The first routed expert of the model's first MoE layer.
const ExpertWeights& first_expert(Engine& m) {
  ExpertTable& t = m.experts();
  for (int32_t l = 0; l < t.layers(); ++l)
    if (t.experts(l) > 0) return t.at(l, 0);
  throw Error("no routed expert");
}

class HostExpertTiming : public ::testing::TestWithParam<std::string> {};

// Each copy is the expert's bytes at its own address: the same outputs bit for bit, in every
// format (FP8's block scales, INT4's group scales and MXFP4's scale bytes move with the data).
TEST_P(HostExpertTiming, CopiesComputeTheExpertsBits) {
  auto m = load_model(test::fixture("golden/" + GetParam()));
  const ExpertWeights& w = first_expert(*m);
  const ExpertCopies copies(w, 3);
  ASSERT_EQ(copies.experts().size(), 3u);
  const int64_t in = w.gate.cols(), out = w.down.rows(), rows = 3;
  std::vector<float> x(size_t(rows * in)), want(size_t(rows * out)), got(size_t(rows * out));
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  const GatedActivation act;
  cpu_backend().expert_ffn(w, act, Tensor(x.data(), rows, in, in), Tensor(want.data(), rows, out, out));
  for (const ExpertWeights& c : copies.experts()) {
    EXPECT_NE(c.gate.q.data, w.gate.q.data);
    if (w.down.q.scale) {
      EXPECT_NE(c.down.q.scale, w.down.q.scale);
    }
    std::fill(got.begin(), got.end(), 0.0f);
    cpu_backend().expert_ffn(c, act, Tensor(x.data(), rows, in, in), Tensor(got.data(), rows, out, out));
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  }
}

// Each row count timed on the host's backend, ascending, each a positive time.
TEST_P(HostExpertTiming, TimesEachRowCount) {
  auto m = load_model(test::fixture("golden/" + GetParam()));
  const ExpertWeights& w = first_expert(*m);
  const ExpertCopies copies(w, copies_beyond_cache(expert_bytes(w)));
  const int64_t rows[] = {1, 2, 4, 8, 16};
  const auto t = time_expert_rows(cpu_backend(), copies.experts(), rows, 2);
  ASSERT_EQ(t.size(), 5u);
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(t[i].first, rows[i]);
    EXPECT_GT(t[i].second, 0);
  }
}

// Beside a GPU auto times the expert from 1 row up until the decision is made; on the CPU backend
// there is no copy (rate 0), so one row decides it, for the GPU side.
TEST_P(HostExpertTiming, MeasurementStopsOnceDecided) {
  auto m = load_model(test::fixture("golden/" + GetParam()));
  const HostExpertMeasurement x = measure_host_expert(first_expert(*m), cpu_backend(), kHostExpertMargin);
  ASSERT_EQ(x.host_seconds.size(), 1u);
  EXPECT_EQ(x.host_seconds[0].first, 1);
  EXPECT_GT(x.host_seconds[0].second, 0);
  EXPECT_EQ(x.bytes, expert_bytes(first_expert(*m)));
  EXPECT_EQ(x.copy_gbps, 0);
  EXPECT_GT(x.threads, 0);
  EXPECT_GT(x.seconds, 0);
  EXPECT_EQ(place_experts(ExpertsOn::Auto, 0, &x).runs, ExpertsOn::Gpu);
}

INSTANTIATE_TEST_SUITE_P(Models, HostExpertTiming,
                         ::testing::Values("deepseek_v3_tiny_fp8", "deepseek_v3_tiny_int4", "qwen3_moe_tiny",
                                           "gpt_oss_tiny", "kimi_k3_tiny"));

}  // namespace
}  // namespace sluice::expert_placement_test
