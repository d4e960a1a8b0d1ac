// The expert index (naming rules over the headers, no model built) agrees with
// what the architecture builders actually load: every routed expert's extents
// equal those of the weights the builder made, and the spine is exactly the
// other tensors the builder read; for every architecture, weight format,
// prepared (bf16 / int8 spine) and packed checkpoints.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "experts/streaming_experts.h"
#include "format/config.h"
#include "format/expert_index.h"
#include "model/architectures.h"
#include "store/prepare.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::expert_index_test {
namespace {

void expect_index_matches_builder(const std::string& dir, bool prepared) {
  const Config cfg = Config::load(dir);
  auto dec = build_decoder(cfg, std::make_unique<Checkpoint>(dir, prepared));
  const Checkpoint& ck = dec->checkpoint();
  const ExpertIndex index(cfg, ck);
  const ExpertTable& table = dec->experts();
  ASSERT_EQ(index.layers(), table.layers()) << dir;
  uint64_t routed = 0;
  int64_t n = 0;
  for (int32_t l = 0; l < table.layers(); ++l) {
    ASSERT_EQ(index.experts(l), table.experts(l)) << dir << " layer " << l;
    for (int32_t e = 0; e < table.experts(l); ++e) {
      EXPECT_EQ(index.extents(l, e), expert_extents(ck, table.at(l, e))) << dir << " expert " << e << " layer " << l;
      EXPECT_EQ(index.bytes(l, e), expert_bytes(table.at(l, e)));
      routed += expert_bytes(table.at(l, e));
      ++n;
    }
  }
  EXPECT_GT(n, 0);
  EXPECT_EQ(index.count(), n);
  EXPECT_EQ(index.total_bytes(), routed);
  // The builder's reads: spine tensors plus expert tensors, nothing else.
  std::set<std::string> read;
  for (const auto& name : dec->weights().accessed_names())
    if (!index.is_expert_tensor(name)) read.insert(name);
  const std::set<std::string> spine(index.spine().begin(), index.spine().end());
  EXPECT_EQ(spine, read) << dir;
  EXPECT_EQ(index.spine_bytes(), dec->weights().accessed_bytes() - routed) << dir;
}

class ExpertIndexGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertIndexGolden, AgreesWithTheBuilder) {
  expect_index_matches_builder(test::fixture("golden/" + GetParam()), false);
  expect_index_matches_builder(test::fixture("golden/" + GetParam()), true);
}

INSTANTIATE_TEST_SUITE_P(Models, ExpertIndexGolden,
                         ::testing::Values("deepseek_v3_tiny", "deepseek_v3_tiny_fp8", "deepseek_v3_tiny_int4",
                                           "qwen3_moe_tiny", "gpt_oss_tiny", "kimi_linear_tiny", "kimi_k3_tiny",
                                           "../../../models/sluice-k3-mini"));

TEST(ExpertIndex, PreparedAndPackedCheckpoints) {
  for (const char* name : {"deepseek_v3_tiny_int4", "kimi_k3_tiny"}) {
    test::TempDir tmp;
    const std::string dir = test::copy_golden(tmp, name);
    prepare({dir, "int8", false, true});
    expect_index_matches_builder(dir, true);
  }
}

TEST(ExpertIndex, MissingExpertWeightIsNamed) {
  test::TempDir tmp;
  const std::string dir = test::copy_golden(tmp, "qwen3_moe_tiny");
  // An index that names a tensor the checkpoint lacks: one expert too many.
  nlohmann::json j = Config::load(dir).json();
  j["num_experts"] = j["num_experts"].get<int64_t>() + 1;
  const Checkpoint ck(dir, false);
  try {
    ExpertIndex index(Config(j, "config.json"), ck);
    FAIL() << "an expert without tensors was indexed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.experts."), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sluice::expert_index_test
