// Context limits: read from every config layout (top level, Kimi's nested
// text_config), enforced by the session before any work (a refused feed leaves
// the session as it was), by the model's forward pass and by the CLI before generating.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "model/model.h"
#include "runtime/session.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::context_limits_test {
namespace {

// A golden checkpoint copied with its max_position_embeddings (wherever the layout keeps it) set to `n`.
std::string with_context(const test::TempDir& tmp, const std::string& name, int64_t n) {
  const std::string dir = test::copy_golden(tmp, name);
  nlohmann::json cfg;
  std::ifstream(dir + "/config.json") >> cfg;
  nlohmann::json& text = cfg.contains("text_config") ? cfg["text_config"] : cfg;
  text[text.contains("model_max_length") ? "model_max_length" : "max_position_embeddings"] = n;
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  return dir;
}

TEST(ContextLimits, ReadFromTopLevelAndNestedTextConfig) {
  EXPECT_EQ(load_model(test::fixture("golden/deepseek_v3_tiny"))->info().max_positions, 128);
  EXPECT_EQ(load_model(test::fixture("golden/qwen3_moe_tiny"))->info().max_positions, 256);
  EXPECT_EQ(load_model(test::fixture("golden/gpt_oss_tiny"))->info().max_positions, 128);
  EXPECT_EQ(load_model(test::fixture("golden/kimi_linear_tiny"))->info().max_positions, 1048576);  // model_max_length
  // Kimi K3 nests the text model's config (and its context) in text_config.
  EXPECT_EQ(load_model(test::fixture("golden/kimi_k3_tiny"))->info().max_positions, 1048576);
  test::TempDir tmp;
  EXPECT_EQ(load_model(with_context(tmp, "kimi_k3_tiny", 40))->info().max_positions, 40);
}

TEST(ContextLimits, RefusedFeedLeavesTheSessionAsItWas) {
  for (const std::string name : {"deepseek_v3_tiny", "kimi_linear_tiny", "kimi_k3_tiny"}) {
    SCOPED_TRACE(name);
    test::TempDir tmp;
    auto model = load_model(with_context(tmp, name, 24));
    std::vector<int32_t> ids(20);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(3 + 7 * i);
    Session s(*model);
    s.feed(ids);
    // 5 more do not fit (25 > 24); neither does a batch that would fit only in part.
    // Chunks of 2: a check made only per chunk would feed 4 of them before refusing.
    s.set_prefill_chunk(2);
    EXPECT_THROW(s.feed({1, 2, 3, 4, 5}), Error);
    EXPECT_THROW(s.feed_all({1, 2, 3, 4, 5}), Error);
    EXPECT_EQ(s.position(), 20);
    EXPECT_EQ(s.tokens(), ids);
    // What still fits gives exactly the logits of a session that was never refused.
    const std::vector<float> after = s.feed({1, 2, 3, 4});
    Session fresh(*model);
    fresh.feed(ids);
    EXPECT_EQ(fresh.feed({1, 2, 3, 4}), after);
    EXPECT_THROW(s.feed({9}), Error);
  }
}

TEST(ContextLimits, ErrorNamesTheLimit) {
  test::TempDir tmp;
  auto model = load_model(with_context(tmp, "kimi_k3_tiny", 8));
  Session s(*model);
  try {
    s.feed(std::vector<int32_t>(9, 5));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context of 8 positions"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.position(), 0);
}

// The model itself (what sessions and batches call) refuses too, before any state changes.
TEST(ContextLimits, ModelRefusesFeedsBeyondItsContext) {
  test::TempDir tmp;
  auto model = load_model(with_context(tmp, "deepseek_v3_tiny", 8));
  const std::vector<int32_t> ids(9, 5);
  auto state = model->new_state();
  try {
    model->forward(*state, ids.data(), 9, nullptr, false);
    FAIL() << "9 tokens fed to a model of 8 positions";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("8 positions"), std::string::npos) << e.what();
  }
  EXPECT_EQ(state->pos, 0);
  // In a batch, one feed that does not fit refuses the whole pass.
  auto other = model->new_state();
  const std::vector<SequenceFeed> feeds = {{other.get(), ids.data(), 3, nullptr, false},
                                           {state.get(), ids.data(), 9, nullptr, false}};
  EXPECT_THROW(model->forward_batch(feeds), Error);
  EXPECT_EQ(other->pos, 0);
  EXPECT_EQ(state->pos, 0);
}

TEST(ContextLimits, GenerateRefusesBeforeGenerating) {
  test::TempDir tmp;
  const std::string dir = with_context(tmp, "kimi_k3_tiny", 16);
  auto r = test::run_sluice({"generate", "--model", dir, "--tokens", "5,17,9,4", "--max-new", "13"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("the prompt (4 tokens) and --max-new 13 do not fit in the model's context of 16 positions"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
  r = test::run_sluice({"generate", "--model", dir, "--tokens", "5,17,9,4", "--max-new", "12", "--ignore-eos"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace
}  // namespace sluice::context_limits_test
