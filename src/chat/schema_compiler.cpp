#include "chat/schema_compiler.h"

#include <algorithm>
#include <functional>
#include <set>

#include "chat/api_error.h"
#include "util/error.h"

namespace sluice::chat {

using json = nlohmann::json;

namespace {

const std::set<std::string> kAnnotations = {"description", "title", "default", "examples", "$schema", "$comment",
                                            "strict", "$id"};

// Keywords that only narrow which values are valid (bounds, patterns, formats...): a
// value that ignores them still has the schema's shape. The arguments of a forced call
// of a tool that is not strict are held to the shape only, as under the reference APIs,
// which do not promise more than that for such tools either; a strict tool's or a
// response format's schema with one of them is refused.
const std::set<std::string> kValueChecks = {
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "pattern", "format",
    "minProperties", "maxProperties", "uniqueItems", "contains", "minContains", "maxContains", "propertyNames",
    "patternProperties", "dependentRequired", "dependentSchemas", "if", "then", "else", "not", "allOf",
    "contentEncoding", "contentMediaType", "contentSchema", "readOnly", "writeOnly", "deprecated",
    "unevaluatedProperties", "unevaluatedItems", "$anchor", "$dynamicAnchor", "$vocabulary"};

}  // namespace

Grammar::Id SchemaCompiler::value(const json& s, const std::string& path) {
  if (s.is_boolean()) {
    if (!s.get<bool>()) bad_field(path, "'{}' is the schema false: no value can match it", path);
    return any();
  }
  if (!s.is_object()) bad_field(path, "'{}' must be a JSON Schema object", path);
  static const std::set<std::string> known = {"type", "properties", "required", "additionalProperties", "items",
                                              "enum", "const", "anyOf", "oneOf", "$ref", "$defs", "definitions",
                                              "minItems", "maxItems", "minLength", "maxLength"};
  for (const auto& [k, v] : s.items())
    if (!known.count(k) && !kAnnotations.count(k) && !(lenient_ && kValueChecks.count(k)))
      bad_field(path + "." + k, "'{}.{}': the schema keyword '{}' cannot be enforced by this server's grammar{}",
                path, k, k, kValueChecks.count(k) ? " (it is not enforced for a tool that is not strict)" : "");
  if (s.contains("$ref")) return ref(s["$ref"], path + ".$ref");
  if (s.contains("const")) return g_.lit(s["const"].dump());
  if (s.contains("enum")) {
    const json& e = s["enum"];
    if (!e.is_array() || e.empty()) bad_field(path + ".enum", "'{}.enum' must be a non-empty array", path);
    std::vector<Grammar::Id> alts;
    for (const auto& v : e) alts.push_back(g_.lit(v.dump()));
    return g_.alt(alts);
  }
  for (const char* k : {"anyOf", "oneOf"})
    if (s.contains(k)) {
      const json& a = s[k];
      if (!a.is_array() || a.empty()) bad_field(path + "." + k, "'{}.{}' must be a non-empty array", path, k);
      std::vector<Grammar::Id> alts;
      for (size_t i = 0; i < a.size(); ++i) alts.push_back(value(a[i], fmt::format("{}.{}[{}]", path, k, i)));
      return g_.alt(alts);
    }
  if (!s.contains("type")) return any();
  const json& t = s["type"];
  if (t.is_array()) {
    std::vector<Grammar::Id> alts;
    for (size_t i = 0; i < t.size(); ++i) {
      if (!t[i].is_string()) bad_field(path + ".type", "'{}.type' must be a string or an array of strings", path);
      alts.push_back(typed(s, t[i].get<std::string>(), path));
    }
    if (alts.empty()) bad_field(path + ".type", "'{}.type' must not be empty", path);
    return g_.alt(alts);
  }
  if (!t.is_string()) bad_field(path + ".type", "'{}.type' must be a string or an array of strings", path);
  return typed(s, t.get<std::string>(), path);
}

Grammar::Id SchemaCompiler::any() {
  if (any_ >= 0) return any_;
  any_ = g_.placeholder();
  const Grammar::Id kv = g_.seq({g_.json_string(), g_.lit(":"), ws(), any_});
  const Grammar::Id obj = g_.seq({g_.lit("{"), g_.repeat(kv, 0, -1, comma()), g_.lit("}")});
  const Grammar::Id arr = g_.seq({g_.lit("["), g_.repeat(any_, 0, -1, comma()), g_.lit("]")});
  g_.define(any_, g_.alt({obj, arr, g_.json_string(), g_.json_number(false), g_.lit("true"), g_.lit("false"),
                          g_.lit("null")}));
  return any_;
}

Grammar::Id SchemaCompiler::any_object() {
  const Grammar::Id kv = g_.seq({g_.json_string(), g_.lit(":"), ws(), any()});
  return g_.seq({g_.lit("{"), g_.repeat(kv, 0, -1, comma()), g_.lit("}")});
}

std::vector<std::tuple<std::string, const json*, bool>> SchemaCompiler::properties(const json& s, const std::string& path) {
  std::vector<std::tuple<std::string, const json*, bool>> out;
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) bad_field(path + ".required", "'{}.required' must be an array of names", path);
    for (const auto& r : s["required"]) {
      if (!r.is_string()) bad_field(path + ".required", "'{}.required' must be an array of names", path);
      required.insert(r.get<std::string>());
    }
  }
  if (s.contains("properties")) {
    if (!s["properties"].is_object()) bad_field(path + ".properties", "'{}.properties' must be an object", path);
    for (const auto& [k, v] : s["properties"].items()) out.emplace_back(k, &v, required.count(k) > 0);
  }
  for (const auto& r : required)
    if (std::none_of(out.begin(), out.end(), [&](const auto& p) { return std::get<0>(p) == r; }))
      bad_field(path + ".required", "'{}.required' names '{}', which is not among its properties", path, r);
  return out;
}

const json* SchemaCompiler::resolve(const json& ref, const std::string& path) {
  if (!ref.is_string()) bad_field(path, "'{}' must be a string", path);
  const std::string r = ref.get<std::string>();
  for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
    const std::string p = prefix;
    if (r.compare(0, p.size(), p) == 0) {
      const std::string section = p.substr(2, p.size() - 3), name = r.substr(p.size());
      if (root_.contains(section) && root_[section].is_object() && root_[section].contains(name))
        return &root_[section][name];
    }
  }
  if (r == "#") return &root_;
  bad_field(path, "'{}': '{}' does not name a definition of this schema (#/$defs/NAME)", path, r);
}

Grammar::Id SchemaCompiler::ref(const json& ref, const std::string& path) {
  const std::string r = ref.is_string() ? ref.get<std::string>() : "";
  Grammar::Id p;
  if (auto it = refs_.find(r); it != refs_.end()) {
    p = it->second;
  } else {
    const json* target = resolve(ref, path);
    p = g_.placeholder();
    refs_[r] = p;
    // "#" is the whole schema; "#/$defs/NAME" is written "$defs/NAME" after the field.
    g_.define(p, value(*target, r == "#" ? param_ : param_ + "." + r.substr(2)));
  }
  const Grammar::Id site = g_.placeholder();
  g_.define(site, p);
  sites_[site] = path;
  return site;
}

Grammar::Id SchemaCompiler::typed(const json& s, const std::string& type, const std::string& path) {
  if (type == "string") {
    auto [lo, hi] = lengths(s, path);
    return g_.json_string(lo, hi);
  }
  if (type == "number") return g_.json_number(false);
  if (type == "integer") return g_.json_number(true);
  if (type == "boolean") return g_.alt({g_.lit("true"), g_.lit("false")});
  if (type == "null") return g_.lit("null");
  if (type == "array") {
    const Grammar::Id item = s.contains("items") ? value(s["items"], path + ".items") : any();
    int64_t lo = 0, hi = -1;
    if (s.contains("minItems")) lo = count(s["minItems"], path + ".minItems");
    if (s.contains("maxItems")) hi = count(s["maxItems"], path + ".maxItems");
    if (hi >= 0 && hi < lo) bad_field(path + ".maxItems", "'{}.maxItems' is below minItems", path);
    return g_.seq({g_.lit("["), g_.repeat(item, lo, hi, comma()), g_.lit("]")});
  }
  if (type == "object") {
    auto props = properties(s, path);
    const bool closed = s.contains("additionalProperties") && s["additionalProperties"] == false;
    if (s.contains("additionalProperties") && !s["additionalProperties"].is_boolean())
      bad_field(path + ".additionalProperties", "'{}.additionalProperties' must be true or false here", path);
    if (props.empty()) return closed ? g_.lit("{}") : any_object();
    // rest(i, first): properties i.. with a comma before the next one unless first.
    std::map<std::pair<size_t, bool>, Grammar::Id> memo;
    std::function<Grammar::Id(size_t, bool)> rest = [&](size_t i, bool first) -> Grammar::Id {
      if (i == props.size()) return g_.lit("}");
      if (auto it = memo.find({i, first}); it != memo.end()) return it->second;
      const auto& [name, schema, required] = props[i];
      const Grammar::Id v = value(*schema, path + ".properties." + name);
      std::vector<Grammar::Id> parts;
      if (!first) parts.push_back(comma());
      parts.push_back(g_.lit(json(name).dump() + ":"));
      parts.push_back(ws());
      parts.push_back(v);
      parts.push_back(rest(i + 1, false));
      Grammar::Id with = g_.seq(parts);
      Grammar::Id r = required ? with : g_.alt({with, rest(i + 1, first)});
      memo[{i, first}] = r;
      return r;
    };
    return g_.seq({g_.lit("{"), rest(0, true)});
  }
  bad_field(path + ".type", "'{}.type' '{}' is not a JSON Schema type", path, type);
}

std::pair<int64_t, int64_t> SchemaCompiler::lengths(const json& s, const std::string& path) {
  int64_t lo = 0, hi = -1;
  if (s.contains("minLength")) lo = count(s["minLength"], path + ".minLength", int64_t(1) << 20);
  if (s.contains("maxLength")) hi = count(s["maxLength"], path + ".maxLength", int64_t(1) << 20);
  if (hi >= 0 && hi < lo) bad_field(path + ".maxLength", "'{}.maxLength' is below minLength", path);
  return {lo, hi};
}

int64_t SchemaCompiler::count(const json& v, const std::string& path, int64_t limit) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > limit)
    bad_field(path, "'{}' must be an integer from 0 to {}", path, limit);
  return v.get<int64_t>();
}

void SchemaCompiler::check_expandable(const std::shared_ptr<Grammar>& g, Grammar::Id root) {
  const auto cycle = g->left_cycle();
  for (auto it = cycle.rbegin(); it != cycle.rend(); ++it)
    if (auto s = sites_.find(*it); s != sites_.end())
      bad_field(s->second,
                "'{}' refers back to its own schema before any value is written (left recursion): such a schema "
                "has no grammar this server can enforce; put the reference inside an object's property or an "
                "array's items",
                s->second);
  if (!cycle.empty()) bad_field(param_, "'{}' refers back to itself before any value is written", param_);
  const Grammar::Id saved = g->root();
  g->set_root(root);
  try {
    GrammarCursor probe(g);
  } catch (const Error& e) {
    bad_field(param_, "'{}' is too ambiguous for this server's grammar: {}", param_, e.what());
  }
  g->set_root(saved);
}

}  // namespace sluice::chat
