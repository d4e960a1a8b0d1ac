#include "text/jinja/value.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "text/utf8.h"
#include "util/error.h"
#include "util/json_depth.h"

namespace sluice::text::jinja {

ValuePtr Value::get(const std::string& key) const {
  for (const auto& [k, v] : obj)
    if (k == key) return v;
  return nullptr;
}

void Value::put(const std::string& key, ValuePtr v) {
  for (auto& [k, old] : obj)
    if (k == key) {
      old = std::move(v);
      return;
    }
  obj.emplace_back(key, std::move(v));
}

bool Value::truthy() const {
  switch (type) {
    case Type::Undefined:
    case Type::Null: return false;
    case Type::Bool: return b;
    case Type::Int: return i != 0;
    case Type::Float: return f != 0 && !std::isnan(f);
    case Type::String: return !s.empty();
    case Type::Array: return !arr.empty();
    case Type::Object:
    case Type::KwArgs: return !obj.empty();
    case Type::Namespace:
    case Type::Function: return true;
  }
  return false;
}

namespace {
std::string js_number(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  if (f == 0) return "0";
  if (f == std::floor(f) && std::fabs(f) < 1e21) return fmt::format("{:.0f}", f);
  // shortest round-trip form; JavaScript writes exponents as e+N / e-N
  std::string s = fmt::format("{}", f);
  auto e = s.find('e');
  if (e != std::string::npos) {
    std::string mant = s.substr(0, e), ex = s.substr(e + 1);
    int n = std::stoi(ex);
    if (n >= -6 && n < 21) return fmt::format("{:f}", f);  // rare: JS uses fixed notation here
    return mant + "e" + (n >= 0 ? "+" : "-") + std::to_string(std::abs(n));
  }
  return s;
}
}  // namespace

std::string Value::to_string() const {
  switch (type) {
    case Type::Undefined: return "undefined";
    case Type::Null: return "null";
    case Type::Bool: return b ? "true" : "false";
    case Type::Int: return std::to_string(i);
    case Type::Float:
      if (f == 0 && std::signbit(f)) return "-0.0";
      if (f == std::floor(f) && std::isfinite(f) && std::fabs(f) < 1e21) return fmt::format("{:.1f}", f);
      return js_number(f);
    case Type::String: return s;
    case Type::Array:
    case Type::Object:
    case Type::Namespace:
    case Type::KwArgs: return to_json(*this, JsonOptions{}, 0, false);
    case Type::Function: return "[function]";
  }
  return "";
}

const char* Value::type_name() const {
  switch (type) {
    case Type::Undefined: return "UndefinedValue";
    case Type::Null: return "NullValue";
    case Type::Bool: return "BooleanValue";
    case Type::Int: return "IntegerValue";
    case Type::Float: return "FloatValue";
    case Type::String: return "StringValue";
    case Type::Array: return tuple ? "TupleValue" : "ArrayValue";
    case Type::Object: return "ObjectValue";
    case Type::Namespace: return "NamespaceValue";
    case Type::Function: return "FunctionValue";
    case Type::KwArgs: return "KeywordArgumentsValue";
  }
  return "?";
}

ValuePtr make_undefined() { return std::make_shared<Value>(); }
ValuePtr make_null() {
  auto v = std::make_shared<Value>();
  v->type = Type::Null;
  return v;
}
ValuePtr make_bool(bool b) {
  auto v = std::make_shared<Value>();
  v->type = Type::Bool;
  v->b = b;
  return v;
}
ValuePtr make_int(int64_t i) {
  auto v = std::make_shared<Value>();
  v->type = Type::Int;
  v->i = i;
  return v;
}
ValuePtr make_float(double f) {
  auto v = std::make_shared<Value>();
  v->type = Type::Float;
  v->f = f;
  return v;
}
ValuePtr make_string(std::string s) {
  auto v = std::make_shared<Value>();
  v->type = Type::String;
  v->s = std::move(s);
  return v;
}
ValuePtr make_array(std::vector<ValuePtr> a) {
  auto v = std::make_shared<Value>();
  v->type = Type::Array;
  v->arr = std::move(a);
  return v;
}
ValuePtr make_object() {
  auto v = std::make_shared<Value>();
  v->type = Type::Object;
  return v;
}
ValuePtr make_function(Function f) {
  auto v = std::make_shared<Value>();
  v->type = Type::Function;
  v->fn = std::move(f);
  return v;
}

ValuePtr from_json(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return make_null();
    case nlohmann::json::value_t::boolean: return make_bool(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return make_int(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return make_int(int64_t(j.get<uint64_t>()));
    case nlohmann::json::value_t::number_float: {
      // JavaScript cannot tell 2.0 from 2: integral numbers are integers there
      double d = j.get<double>();
      if (d == std::floor(d) && std::fabs(d) < 9007199254740992.0) return make_int(int64_t(d));
      return make_float(d);
    }
    case nlohmann::json::value_t::string: return make_string(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<ValuePtr> a;
      for (const auto& e : j) a.push_back(from_json(e));
      return make_array(std::move(a));
    }
    case nlohmann::json::value_t::object: {
      auto o = make_object();
      for (const auto& [k, v] : j.items()) o->put(k, from_json(v));
      return o;
    }
    default: return make_undefined();
  }
}

namespace {
// JSON.stringify of a string: escapes " \ and control characters only.
std::string json_string(const std::string& s, bool ascii) {
  std::string out = "\"";
  size_t i = 0, len = 0;
  while (i < s.size()) {
    int32_t cp = utf8_decode(s, i, &len);
    if (cp < 0) cp = 0xFFFD;
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (cp < 0x20) {
          out += fmt::format("\\u{:04x}", cp);
        } else if (ascii && cp >= 0x7F) {
          if (cp >= 0x10000) {
            uint32_t c = uint32_t(cp) - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (c >> 10), 0xDC00 + (c & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", cp);
          }
        } else {
          utf8_append(out, uint32_t(cp));
        }
    }
    i += len;
  }
  return out + "\"";
}
}  // namespace

std::string to_json(const Value& v, const JsonOptions& o, int depth, bool undefined_as_null) {
  std::string item_sep = o.custom_seps ? o.item_sep : (o.indent > 0 ? "," : ", ");
  std::string key_sep = o.custom_seps ? o.key_sep : ": ";
  switch (v.type) {
    case Type::Null: return "null";
    case Type::Undefined: return undefined_as_null ? "null" : "undefined";
    case Type::Bool: return v.b ? "true" : "false";
    case Type::Int: return std::to_string(v.i);
    case Type::Float: return js_number(v.f);
    case Type::String: return json_string(v.s, o.ensure_ascii);
    case Type::Array:
    case Type::Object:
    case Type::Namespace:
    case Type::KwArgs: {
      if (v.tuple) fail("Cannot convert to JSON: TupleValue");  // as @huggingface/jinja
      // The writer recurses: a value nested past the shared bound (a template can build one) is refused.
      if (depth >= kMaxJsonDepth) fail("tojson: the value is nested deeper than {} levels (the limit)", kMaxJsonDepth);
      std::string ind = o.indent > 0 ? std::string(size_t(o.indent), ' ') : "";
      std::string base = "\n", child;
      for (int k = 0; k < depth; ++k) base += ind;
      child = base + ind;
      std::vector<std::string> core;
      if (v.type == Type::Array) {
        for (const auto& e : v.arr) core.push_back(to_json(*e, o, depth + 1, undefined_as_null));
        std::string out = "[";
        if (o.indent > 0 && !core.empty()) {
          out += child;
          for (size_t k = 0; k < core.size(); ++k) out += (k ? item_sep + child : "") + core[k];
          return out + base + "]";
        }
        for (size_t k = 0; k < core.size(); ++k) out += (k ? item_sep : "") + core[k];
        return out + "]";
      }
      auto entries = v.obj;
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (const auto& [k, e] : entries) {
        std::string item = json_string(k, o.ensure_ascii) + key_sep + to_json(*e, o, depth + 1, undefined_as_null);
        core.push_back(o.indent > 0 ? child + item : item);
      }
      std::string out = "{";
      for (size_t k = 0; k < core.size(); ++k) out += (k ? item_sep : "") + core[k];
      if (o.indent > 0 && !core.empty()) out += base;
      return out + "}";
    }
    case Type::Function: fail("Cannot convert to JSON: FunctionValue");
  }
  return "";
}

int64_t js_length(const std::string& s) {
  int64_t n = 0;
  size_t i = 0, len = 0;
  while (i < s.size()) {
    int32_t cp = utf8_decode(s, i, &len);
    n += cp >= 0x10000 ? 2 : 1;
    i += len;
  }
  return n;
}

bool js_space(uint32_t c) {
  return (c >= 9 && c <= 13) || c == 0x20 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

std::string js_trim(const std::string& s, bool left, bool right) {
  size_t b = 0, e = s.size(), len = 0;
  if (left)
    while (b < e) {
      int32_t cp = utf8_decode(s, b, &len);
      if (cp < 0 || !js_space(uint32_t(cp))) break;
      b += len;
    }
  if (right)
    while (e > b) {
      size_t st = e - 1;
      while (st > b && (uint8_t(s[st]) & 0xC0) == 0x80) --st;
      int32_t cp = utf8_decode(s, st, &len);
      if (cp < 0 || !js_space(uint32_t(cp))) break;
      e = st;
    }
  return s.substr(b, e - b);
}

}  // namespace sluice::text::jinja
