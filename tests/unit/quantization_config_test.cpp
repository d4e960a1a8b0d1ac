// quantization_config: every supported scheme of the golden checkpoints loads;
// what the loaders do not implement (zero points, static input scales, 8-bit,
// quantized KV cache, other methods) is refused before loading, naming the field.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "format/safetensors.h"
#include "engine/engine.h"
#include "model/model.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::quantization_config_test {
namespace {

using nlohmann::json;

// A golden checkpoint copied with its config changed by `edit`; the error of loading it, or "".
std::string load_error(const std::string& name, const std::function<void(json&)>& edit) {
  test::TempDir tmp;
  const std::string dir = test::copy_golden(tmp, name);
  json cfg;
  std::ifstream(dir + "/config.json") >> cfg;
  edit(cfg);
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  try {
    load_model(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

json& weights(json& cfg) { return cfg["quantization_config"]["config_groups"]["group_0"]["weights"]; }

TEST(QuantizationConfig, SupportedSchemesLoad) {
  for (const char* name : {"deepseek_v3_tiny_fp8", "deepseek_v3_tiny_int4", "gpt_oss_tiny", "kimi_k3_tiny"})
    EXPECT_EQ(load_error(name, [](json&) {}), "") << name;
}

TEST(QuantizationConfig, UnsupportedSchemesAreRefusedNamingTheField) {
  struct Case {
    const char* model;
    std::function<void(json&)> edit;
    const char* field;
  };
  const std::vector<Case> cases = {
      {"deepseek_v3_tiny_int4", [](json& c) { weights(c)["symmetric"] = false; },
       "quantization_config.config_groups.group_0.weights.symmetric is false"},
      {"deepseek_v3_tiny_int4", [](json& c) { weights(c)["num_bits"] = 8; },
       "quantization_config.config_groups.group_0.weights.num_bits is 8"},
      {"deepseek_v3_tiny_int4",
       [](json& c) { c["quantization_config"]["config_groups"]["group_0"]["input_activations"] = {{"num_bits", 8}}; },
       "quantization_config.config_groups.group_0.input_activations is set"},
      {"deepseek_v3_tiny_int4", [](json& c) { c["quantization_config"]["kv_cache_scheme"] = {{"num_bits", 8}}; },
       "quantization_config.kv_cache_scheme is set"},
      {"deepseek_v3_tiny_int4", [](json& c) { weights(c)["actorder"] = "group"; },
       "quantization_config.config_groups.group_0.weights.actorder is set"},
      {"deepseek_v3_tiny_int4", [](json& c) { c["quantization_config"]["format"] = "float-quantized"; },
       "quantization_config.format is 'float-quantized'"},
      {"deepseek_v3_tiny_fp8", [](json& c) { c["quantization_config"]["activation_scheme"] = "static"; },
       "quantization_config.activation_scheme is 'static'"},
      {"deepseek_v3_tiny_fp8", [](json& c) { c["quantization_config"]["weight_block_size"] = {64, 64}; },
       "quantization_config.weight_block_size is [64,64]"},
      {"deepseek_v3_tiny_fp8", [](json& c) { c["quantization_config"]["quant_method"] = "gptq"; },
       "quantization_config.quant_method is 'gptq'"},
      {"kimi_k3_tiny", [](json& c) { c["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = 16; },
       "text_config.quantization_config.config_groups.group_0.weights.group_size is 16"},
  };
  for (const auto& c : cases) {
    const std::string err = load_error(c.model, c.edit);
    EXPECT_NE(err.find(c.field), std::string::npos) << c.model << ": " << (err.empty() ? "loaded" : err);
  }
}

// An asymmetric INT4 checkpoint as such tools write it (zero points stored beside
// the scales) must not load, however its config is written.
TEST(QuantizationConfig, ZeroPointCheckpointIsRefused) {
  test::TempDir tmp;
  const std::string dir = test::copy_golden(tmp, "deepseek_v3_tiny_int4");
  json cfg;
  std::ifstream(dir + "/config.json") >> cfg;
  weights(cfg)["symmetric"] = false;
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  try {
    load_model(dir);
    FAIL() << "an asymmetric INT4 checkpoint loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("zero points"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sluice::quantization_config_test
