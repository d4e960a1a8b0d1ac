#include "server/json_fields.h"

#include <cmath>
#include <limits>

#include "chat/api_error.h"

namespace sluice::server::fields {

using chat::bad_field;
using nlohmann::json;

namespace {

// The type check of the *_at functions: "'<where>' must be <what>" (+ ", got <type>").
const json& typed(const json& v, bool ok, const std::string& where, const char* what, Wording wording) {
  if (ok) return v;
  if (wording == Wording::WithGot) bad_field(where, "'{}' must be {}, got {}", where, what, type_name(v));
  bad_field(where, "'{}' must be {}", where, what);
}

}  // namespace

const char* type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    default: return "an unsupported value";
  }
}

bool present(const json& obj, const char* key) { return obj.contains(key) && !obj[key].is_null(); }

void require(const json& obj, const std::string& key, const std::string& prefix) {
  if (!obj.contains(key)) bad_field(prefix + key, "'{}{}' is required", prefix, key);
}

void require_present(const json& obj, const std::string& key, const std::string& prefix) {
  if (!present(obj, key.c_str())) bad_field(prefix + key, "'{}{}' is required", prefix, key);
}

void only_known(const json& obj, const std::set<std::string>& known, const std::string& prefix) {
  for (const auto& [k, v] : obj.items())
    if (!known.count(k)) bad_field(prefix + k, "unknown field '{}{}': this server does not support it", prefix, k);
}

std::string string_at(const json& v, const std::string& where, Wording wording) {
  return typed(v, v.is_string(), where, "a string", wording).get<std::string>();
}

bool boolean_at(const json& v, const std::string& where, Wording wording) {
  return typed(v, v.is_boolean(), where, "a boolean", wording).get<bool>();
}

const json& object_at(const json& v, const std::string& where, Wording wording) {
  return typed(v, v.is_object(), where, "an object", wording);
}

const json& array_at(const json& v, const std::string& where, Wording wording) {
  return typed(v, v.is_array(), where, "an array", wording);
}

double number_in(const json& obj, const char* key, double lo, double hi) {
  const json& v = obj[key];
  if (!v.is_number()) bad_field(key, "'{}' must be a number, got {}", key, type_name(v));
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) bad_field(key, "'{}' must be between {} and {}, got {}", key, lo, hi, v.dump());
  return d;
}

int64_t integer_in(const json& obj, const char* key, int64_t lo, int64_t hi) {
  const json& v = obj[key];
  if (!v.is_number_integer()) bad_field(key, "'{}' must be an integer, got {}", key, type_name(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    bad_field(key, "'{}' must be between {} and {}, got {}", key, lo, hi, v.dump());
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi) bad_field(key, "'{}' must be between {} and {}, got {}", key, lo, hi, i);
  return i;
}

}  // namespace sluice::server::fields
