#include "format/generation_config.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace sluice {

std::vector<int32_t> generation_eos_ids(const std::string& dir) {
  std::ifstream in(dir + "/generation_config.json");
  if (!in) return {};
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}/generation_config.json: not valid JSON: {}", dir, e.what());
  }
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
