// Runtime values of the Jinja interpreter. Semantics follow @huggingface/jinja
// (the reference the chat-template tests compare with): JSON-like values,
// insertion-ordered objects, namespaces, functions, and a distinct Undefined.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice::text::jinja {

struct Value;
using ValuePtr = std::shared_ptr<Value>;
class Env;
using Function = std::function<ValuePtr(std::vector<ValuePtr>& args, Env& env)>;

enum class Type { Undefined, Null, Bool, Int, Float, String, Array, Object, Namespace, Function, KwArgs };

struct Value {
  Type type = Type::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<ValuePtr> arr;
  std::vector<std::pair<std::string, ValuePtr>> obj;  // Object, Namespace, KwArgs (insertion order)
  Function fn;
  bool tuple = false;

  ValuePtr get(const std::string& key) const;  // null if absent
  void put(const std::string& key, ValuePtr v);
  bool truthy() const;
  std::string to_string() const;  // what {{ }} prints
  const char* type_name() const;
};

ValuePtr make_undefined();
ValuePtr make_null();
ValuePtr make_bool(bool b);
ValuePtr make_int(int64_t i);
ValuePtr make_float(double f);
ValuePtr make_string(std::string s);
ValuePtr make_array(std::vector<ValuePtr> a);
ValuePtr make_object();
ValuePtr make_function(Function f);

ValuePtr from_json(const nlohmann::json& j);
struct JsonOptions {
  int indent = -1;  // < 0: none
  bool ensure_ascii = false, sort_keys = false;
  std::string item_sep, key_sep;
  bool custom_seps = false;
};
std::string to_json(const Value& v, const JsonOptions& o, int depth = 0, bool undefined_as_null = true);

// JavaScript string length (UTF-16 code units) of UTF-8 text.
int64_t js_length(const std::string& s);
bool js_space(uint32_t cp);
std::string js_trim(const std::string& s, bool left, bool right);

}  // namespace sluice::text::jinja
