// model_layout(): layer-pattern fields that would divide by zero are refused naming the field
// (found by config_fuzz: decoder_sparse_step 0).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "format/model_layout.h"
#include "engine/engine.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::model_layout_test {
namespace {

void expect_refused(const std::string& fixture, const std::string& field) {
  auto j = nlohmann::json::parse(std::ifstream(std::string(SLUICE_FIXTURES) + "/golden/" + fixture + "/config.json"));
  EXPECT_NO_THROW(model_layout(Config(j, fixture)));
  j[field] = 0;
  try {
    model_layout(Config(j, fixture));
    ADD_FAILURE() << fixture << ": " << field << " = 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

// The same for attention heads (a division by zero in the head size): the builders refuse them.
TEST(ModelLayout, ZeroAttentionHeadsAreRefusedNamingTheField) {
  for (const std::string fixture : {"qwen3_moe_tiny", "gpt_oss_tiny"}) {
    test::TempDir tmp;
    const std::string dir = test::copy_golden(tmp, fixture);
    auto j = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
    j["num_attention_heads"] = 0;
    std::ofstream(dir + "/config.json") << j.dump();
    try {
      load_model(dir);
      ADD_FAILURE() << fixture << ": num_attention_heads = 0 accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("num_attention_heads"), std::string::npos) << e.what();
    }
  }
}

TEST(ModelLayout, LayerStepsOfZeroAreRefusedNamingTheField) {
  expect_refused("qwen3_moe_tiny", "decoder_sparse_step");
  expect_refused("deepseek_v3_tiny", "moe_layer_freq");
}

}  // namespace
}  // namespace sluice::model_layout_test
