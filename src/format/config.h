// Typed access to config.json with errors that name the missing or mistyped field.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice {

class Config {
 public:
  Config(nlohmann::json j, std::string source) : j_(std::move(j)), source_(std::move(source)) {}
  static Config load(const std::string& model_dir);  // reads model_dir/config.json

  const nlohmann::json& json() const { return j_; }
  const std::string& source() const { return source_; }
  bool has(const std::string& key) const { return j_.contains(key) && !j_[key].is_null(); }

  int64_t req_int(const std::string& key) const;
  double req_double(const std::string& key) const;
  std::string req_string(const std::string& key) const;
  bool req_bool(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t def) const;
  double get_double(const std::string& key, double def) const;
  bool get_bool(const std::string& key, bool def) const;
  std::string get_string(const std::string& key, const std::string& def) const;
  std::vector<std::string> get_strings(const std::string& key) const;  // empty if absent
  std::vector<int64_t> get_ints(const std::string& key) const;         // empty if absent
  // A token id or a list of them (eos_token_id); empty if absent; each a non-negative int32.
  std::vector<int32_t> get_token_ids(const std::string& key) const;
  Config sub(const std::string& key) const;                             // required nested object
  std::optional<Config> opt_sub(const std::string& key) const;

 private:
  const nlohmann::json& field(const std::string& key) const;
  nlohmann::json j_;
  std::string source_;  // e.g. "dir/config.json" or "dir/config.json: text_config"
};

}  // namespace sluice
