#include "format/config.h"

#include <fstream>

#include "util/error.h"
#include "util/json_integer.h"

namespace sluice {

Config Config::load(const std::string& model_dir) {
  std::string path = model_dir + "/config.json";
  std::ifstream in(path);
  if (!in) fail("{}: cannot open", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
  if (!j.is_object()) fail("{}: must be a JSON object", path);
  return Config(std::move(j), path);
}

const nlohmann::json& Config::field(const std::string& key) const {
  if (!has(key)) fail("{}: missing required field '{}'", source_, key);
  return j_[key];
}

int64_t Config::req_int(const std::string& key) const {
  const auto& v = field(key);
  if (const auto i = json_integer<int64_t>(v, /*integral_floats=*/true)) return *i;
  fail("{}: field '{}' must be an integer, got {}", source_, key, v.dump());
}

double Config::req_double(const std::string& key) const {
  const auto& v = field(key);
  if (!v.is_number()) fail("{}: field '{}' must be a number, got {}", source_, key, v.dump());
  return v.get<double>();
}

std::string Config::req_string(const std::string& key) const {
  const auto& v = field(key);
  if (!v.is_string()) fail("{}: field '{}' must be a string, got {}", source_, key, v.dump());
  return v.get<std::string>();
}

bool Config::req_bool(const std::string& key) const {
  const auto& v = field(key);
  if (!v.is_boolean()) fail("{}: field '{}' must be true or false, got {}", source_, key, v.dump());
  return v.get<bool>();
}

int64_t Config::get_int(const std::string& key, int64_t def) const { return has(key) ? req_int(key) : def; }
double Config::get_double(const std::string& key, double def) const { return has(key) ? req_double(key) : def; }
bool Config::get_bool(const std::string& key, bool def) const { return has(key) ? req_bool(key) : def; }
std::string Config::get_string(const std::string& key, const std::string& def) const {
  return has(key) ? req_string(key) : def;
}

std::vector<std::string> Config::get_strings(const std::string& key) const {
  std::vector<std::string> out;
  if (!has(key)) return out;
  const auto& v = j_[key];
  if (!v.is_array()) fail("{}: field '{}' must be an array of strings", source_, key);
  for (const auto& s : v) {
    if (!s.is_string()) fail("{}: field '{}' must be an array of strings", source_, key);
    out.push_back(s.get<std::string>());
  }
  return out;
}

std::vector<int64_t> Config::get_ints(const std::string& key) const {
  std::vector<int64_t> out;
  if (!has(key)) return out;
  const auto& v = j_[key];
  if (!v.is_array()) fail("{}: field '{}' must be an array of integers", source_, key);
  for (const auto& s : v) {
    if (!s.is_number_integer()) fail("{}: field '{}' must be an array of integers", source_, key);
    out.push_back(s.get<int64_t>());
  }
  return out;
}

std::vector<int32_t> Config::get_token_ids(const std::string& key) const {
  std::vector<int32_t> out;
  if (!has(key)) return out;
  const auto& v = j_[key];
  for (const auto& id : v.is_array() ? v : nlohmann::json::array({v})) {
    const auto i = json_integer<int32_t>(id);
    if (!i || *i < 0) fail("{}: field '{}' must be a token id or a list of them, got {}", source_, key, v.dump());
    out.push_back(*i);
  }
  return out;
}

Config Config::sub(const std::string& key) const {
  const auto& v = field(key);
  if (!v.is_object()) fail("{}: field '{}' must be an object", source_, key);
  return Config(v, source_ + ": " + key);
}

std::optional<Config> Config::opt_sub(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return sub(key);
}

}  // namespace sluice
