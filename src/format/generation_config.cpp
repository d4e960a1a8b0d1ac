#include "format/generation_config.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace sluice {

namespace {

std::optional<nlohmann::json> read_generation_config(const std::string& dir) {
  std::ifstream in(dir + "/generation_config.json");
  if (!in) return std::nullopt;
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}/generation_config.json: not valid JSON: {}", dir, e.what());
  }
}

}  // namespace

std::optional<GenerationDefaults> generation_defaults(const std::string& dir) {
  auto file = read_generation_config(dir);
  if (!file) return std::nullopt;
  const nlohmann::json& j = *file;
  GenerationDefaults d;
  if (!j.is_object()) fail("{}/generation_config.json: must be a JSON object", dir);
  auto number = [&](const char* key, double lo, double hi) -> std::optional<double> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    if (!j[key].is_number() || j[key].get<double>() < lo || j[key].get<double>() > hi)
      fail("{}/generation_config.json: '{}' must be a number in [{}, {}], got {}", dir, key, lo, hi, j[key].dump());
    return j[key].get<double>();
  };
  if (j.contains("do_sample") && !j["do_sample"].is_null()) {
    if (!j["do_sample"].is_boolean()) fail("{}/generation_config.json: 'do_sample' must be true or false", dir);
    d.do_sample = j["do_sample"].get<bool>();
  }
  d.temperature = number("temperature", 0, 100);
  d.top_p = number("top_p", 0, 1);
  d.min_p = number("min_p", 0, 1);
  if (auto k = number("top_k", 0, 1e9)) {
    if (*k != double(int64_t(*k))) fail("{}/generation_config.json: 'top_k' must be an integer", dir);
    d.top_k = int64_t(*k);
  }
  return d;
}

std::vector<int32_t> generation_eos_ids(const std::string& dir) {
  auto file = read_generation_config(dir);
  if (!file) return {};
  const nlohmann::json& j = *file;
  std::vector<int32_t> ids;
  if (!j.is_object() || !j.contains("eos_token_id")) return ids;
  const auto& e = j["eos_token_id"];
  if (e.is_number_integer()) ids.push_back(e.get<int32_t>());
  else if (e.is_array())
    for (const auto& x : e)
      if (x.is_number_integer()) ids.push_back(x.get<int32_t>());
  return ids;
}

}  // namespace sluice
