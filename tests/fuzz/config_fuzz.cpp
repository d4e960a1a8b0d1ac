// Fuzz target: config.json against a real checkpoint. The input is written as
// the config of a directory whose model.safetensors is the golden tiny model of
// the input's model_type (the rest of the input decides nothing else); loading
// must succeed or throw sluice::Error, and a loaded model must survive a
// two-token forward pass.
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_files.h"
#include "engine/engine.h"
#include "runtime/session.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::map<std::string, std::string> fixture = {
      {"deepseek_v3", "deepseek_v3_tiny"}, {"kimi_k2", "deepseek_v3_tiny_fp8"}, {"qwen3_moe", "qwen3_moe_tiny"},
      {"gpt_oss", "gpt_oss_tiny"},         {"kimi_linear", "kimi_linear_tiny"}, {"kimi_k3", "kimi_k3_tiny"}};
  std::string type = "qwen3_moe";
  try {
    const auto j = nlohmann::json::parse(std::string_view(reinterpret_cast<const char*>(data), size));
    if (j.is_object() && j.contains("model_type") && j["model_type"].is_string() &&
        fixture.count(j["model_type"].get<std::string>()))
      type = j["model_type"].get<std::string>();
  } catch (const nlohmann::json::exception&) {
  }
  const std::string dir = sluice::fuzz::scratch_dir();
  sluice::fuzz::write_input("config.json", data, size);
  sluice::fuzz::link_file(dir, "model.safetensors", std::string(SLUICE_FIXTURES) + "/golden/" + fixture.at(type) + "/model.safetensors");
  try {
    auto m = sluice::load_model(dir);
    if (m->info().vocab > 3) {
      sluice::Session s(*m);
      s.feed({1, 2});
    }
  } catch (const sluice::Error&) {
  }
  return 0;
}
