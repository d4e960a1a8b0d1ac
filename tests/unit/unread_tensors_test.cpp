// Every tensor of the text model is read by its loader: each golden checkpoint
// and the shipped model load with none left over, and a renamed optional tensor
// (which the loader would otherwise skip, computing a different model) is an
// error naming it.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "engine/engine.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::unread_tensors_test {
namespace {

// Renames a tensor in DIR/model.safetensors' header (same length, so no offset moves).
void rename_tensor(const std::string& dir, const std::string& from, const std::string& to) {
  ASSERT_EQ(from.size(), to.size());
  const std::string path = dir + "/model.safetensors";
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = bytes.find("\"" + from + "\"");
  ASSERT_NE(at, std::string::npos) << from;
  bytes.replace(at + 1, from.size(), to);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(UnreadTensors, NoneInAnyGoldenOrTheShippedModel) {
  for (const char* name : {"deepseek_v3_tiny", "deepseek_v3_tiny_fp8", "deepseek_v3_tiny_int4", "qwen3_moe_tiny",
                           "gpt_oss_tiny", "kimi_linear_tiny", "kimi_k3_tiny"}) {
    EXPECT_NO_THROW(load_model(test::fixture(std::string("golden/") + name))) << name;
  }
  EXPECT_NO_THROW(load_model(test::fixture("../../models/sluice-k3-mini")));
}

TEST(UnreadTensors, RenamedOptionalTensorIsAnErrorNamingIt) {
  test::TempDir tmp;
  const std::string dir = test::copy_golden(tmp, "deepseek_v3_tiny");
  // The router's selection bias is optional: under another name the model would route without it.
  rename_tensor(dir, "model.layers.2.mlp.gate.e_score_correction_bias", "model.layers.2.mlp.gate.e_score_correction_bia5");
  try {
    load_model(dir);
    FAIL() << "a checkpoint with an unread tensor loaded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model.layers.2.mlp.gate.e_score_correction_bia5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("never read"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace sluice::unread_tensors_test
