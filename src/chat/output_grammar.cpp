#include "chat/output_grammar.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "chat/api_error.h"
#include "text/xtml.h"
#include "util/error.h"

namespace sluice::chat {

using nlohmann::json;

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

class SchemaCompiler {
 public:
  // `lenient`: keywords of kValueChecks are not enforced (a tool that is not strict).
  SchemaCompiler(Grammar& g, const json& root, std::string param, bool lenient = false)
      : g_(g), root_(root), param_(std::move(param)), lenient_(lenient) {}

  Grammar::Id value(const json& s, const std::string& path) {
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

  Grammar::Id any() {
    if (any_ >= 0) return any_;
    any_ = g_.placeholder();
    const Grammar::Id kv = g_.seq({g_.json_string(), g_.lit(":"), ws(), any_});
    const Grammar::Id obj = g_.seq({g_.lit("{"), g_.repeat(kv, 0, -1, comma()), g_.lit("}")});
    const Grammar::Id arr = g_.seq({g_.lit("["), g_.repeat(any_, 0, -1, comma()), g_.lit("]")});
    g_.define(any_, g_.alt({obj, arr, g_.json_string(), g_.json_number(false), g_.lit("true"), g_.lit("false"),
                            g_.lit("null")}));
    return any_;
  }
  Grammar::Id any_object() {
    const Grammar::Id kv = g_.seq({g_.json_string(), g_.lit(":"), ws(), any()});
    return g_.seq({g_.lit("{"), g_.repeat(kv, 0, -1, comma()), g_.lit("}")});
  }

  // Properties of an object schema in order, with whether each is required.
  std::vector<std::tuple<std::string, const json*, bool>> properties(const json& s, const std::string& path) {
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

  const json* resolve(const json& ref, const std::string& path) {
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

 private:
  Grammar::Id ws() { return g_.alt({g_.lit(""), g_.lit(" ")}); }
  Grammar::Id comma() { return g_.seq({g_.lit(","), ws()}); }

  // Each $ref is a node of its own (its path kept for errors) leading to the one
  // rule of its target, compiled once: a recursive schema is a cycle in the grammar.
  Grammar::Id ref(const json& ref, const std::string& path) {
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

  Grammar::Id typed(const json& s, const std::string& type, const std::string& path) {
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

 public:
  std::pair<int64_t, int64_t> lengths(const json& s, const std::string& path) {
    int64_t lo = 0, hi = -1;
    if (s.contains("minLength")) lo = count(s["minLength"], path + ".minLength", int64_t(1) << 20);
    if (s.contains("maxLength")) hi = count(s["maxLength"], path + ".maxLength", int64_t(1) << 20);
    if (hi >= 0 && hi < lo) bad_field(path + ".maxLength", "'{}.maxLength' is below minLength", path);
    return {lo, hi};
  }

 private:
  int64_t count(const json& v, const std::string& path, int64_t limit = 4096) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > limit)
      bad_field(path, "'{}' must be an integer from 0 to {}", path, limit);
    return v.get<int64_t>();
  }

  Grammar& g_;
  const json& root_;
  std::string param_;
  bool lenient_ = false;
  Grammar::Id any_ = -1;
  std::map<std::string, Grammar::Id> refs_;
  std::map<Grammar::Id, std::string> sites_;  // each $ref's node -> its path

 public:
  // A $ref reached again before any byte is written (left recursion) has no
  // grammar a cursor can expand: a 400 naming the $ref that closes the cycle.
  // A grammar that still passes the expansion's budget is refused the same way.
  void check_expandable(const std::shared_ptr<Grammar>& g, Grammar::Id root) {
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
};

const json* tool_parameters(const json& tools, const std::string& name, size_t* index) {
  for (size_t i = 0; i < tools.size(); ++i)
    if (tools[i]["function"]["name"] == name) {
      *index = i;
      return tools[i]["function"].contains("parameters") ? &tools[i]["function"]["parameters"] : nullptr;
    }
  return nullptr;
}

// K3 arguments: each property as <|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>,
// strings raw (no '<'), everything else as JSON (what text/xtml renders and
// parses); a schema that is not an object of plainly typed properties goes in one
// <|open|>json type="object"<|sep|>...<|close|>json<|sep|> block.
Grammar::Id k3_arguments(Grammar& g, SchemaCompiler& sc, const json* params, const std::string& path) {
  auto json_block = [&](Grammar::Id v) {
    return g.seq({g.lit("<|open|>json type=\"object\"<|sep|>"), v, g.lit("<|close|>json<|sep|>")});
  };
  if (!params) return json_block(sc.any_object());
  const json& s = *params;
  const Grammar::Id whole = sc.value(s, path);  // checks every keyword
  if (!s.is_object() || !s.contains("properties") || s.contains("$ref") || s.contains("anyOf") || s.contains("oneOf"))
    return json_block(whole);
  auto props = sc.properties(s, path);
  Grammar::Id tail = g.lit("");
  for (auto it = props.rbegin(); it != props.rend(); ++it) {
    const auto& [name, ps, required] = *it;
    const std::string ppath = path + ".properties." + name;
    const json* p = ps;
    if (p->is_object() && p->contains("$ref")) p = sc.resolve((*p)["$ref"], ppath + ".$ref");
    std::vector<std::string> types;
    if (p->is_object() && p->contains("type") && (*p)["type"].is_string()) types.push_back((*p)["type"]);
    if (p->is_object() && p->contains("type") && (*p)["type"].is_array())
      for (const auto& t : (*p)["type"]) types.push_back(t.get<std::string>());
    if (types.empty() || (p->is_object() && (p->contains("anyOf") || p->contains("oneOf")))) return json_block(whole);
    std::vector<Grammar::Id> forms;
    for (const auto& t : types) {
      Grammar::Id v;
      std::string attr = t == "integer" ? "number" : t;
      if (t == "string") {
        const bool listed = p->contains("enum") || p->contains("const");
        std::vector<Grammar::Id> alts;
        if (listed)
          for (const auto& e : p->contains("const") ? json::array({(*p)["const"]}) : (*p)["enum"])
            if (e.is_string()) alts.push_back(g.lit(e.get<std::string>()));
        if (listed && alts.empty()) continue;
        auto [lo, hi] = sc.lengths(*p, ppath);
        v = listed ? g.alt(alts) : g.text(hi < 0 ? int64_t(1) << 20 : hi, lo);
      } else {
        json typed = *p;
        typed["type"] = t;
        v = sc.value(typed, ppath);
      }
      forms.push_back(g.seq({g.lit("<|open|>argument key=\"" + text::xtml_escape(name) + "\" type=\"" + attr + "\"<|sep|>"),
                             v, g.lit("<|close|>argument<|sep|>")}));
    }
    if (forms.empty()) return json_block(whole);
    const Grammar::Id with = g.seq({g.alt(forms), tail});
    tail = required ? with : g.alt({with, tail});
  }
  return tail;
}

Grammar::Id index_digits(Grammar& g) {
  std::vector<Grammar::Id> digits;
  for (char d = '0'; d <= '9'; ++d) digits.push_back(g.lit(std::string(1, d)));
  return g.repeat(g.alt(digits), 1, 3);
}

}  // namespace

std::shared_ptr<const Grammar> json_schema_grammar(const json& schema, const std::string& param) {
  auto g = std::make_shared<Grammar>();
  SchemaCompiler sc(*g, schema, param);
  const Grammar::Id root = sc.value(schema, param);
  sc.check_expandable(g, root);
  g->set_root(root);
  return g;
}

std::shared_ptr<const Grammar> json_object_grammar() {
  auto g = std::make_shared<Grammar>();
  const json empty = json::object();
  SchemaCompiler sc(*g, empty, "response_format");
  g->set_root(sc.any_object());
  return g;
}

std::shared_ptr<const Grammar> tool_call_grammar(const ReplySyntax& syn, const json& tools,
                                                 const std::vector<std::string>& allowed, bool parallel,
                                                 const std::set<std::string>& strict, int64_t reasoning_bytes) {
  auto g = std::make_shared<Grammar>();
  std::vector<Grammar::Id> calls;
  const std::string& fam = syn.name;
  for (const auto& name : allowed) {
    size_t index = 0;
    const json* params = tool_parameters(tools, name, &index);
    const std::string path = fmt::format("tools[{}].function.parameters", index);
    const json empty = json::object();
    SchemaCompiler sc(*g, params ? *params : empty, path, /*lenient=*/!strict.count(name));
    const Grammar::Id args = params ? sc.value(*params, path) : sc.any_object();
    sc.check_expandable(g, args);
    const std::string qname = json(name).dump();
    if (fam == "qwen3") {
      calls.push_back(g->seq({g->lit("<tool_call>\n{\"name\": " + qname + ", \"arguments\": "), args,
                              g->lit("}\n</tool_call>")}));
    } else if (fam == "deepseek_v3") {
      calls.push_back(g->seq({g->lit("<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + name + "\n```json\n"), args,
                              g->lit("\n```<｜tool▁call▁end｜>")}));
    } else if (fam == "kimi_k2") {
      calls.push_back(g->seq({g->lit("<|tool_call_begin|>functions." + name + ":"), index_digits(*g),
                              g->lit("<|tool_call_argument_begin|>"), args, g->lit("<|tool_call_end|>")}));
    } else if (fam == "kimi_k3") {
      calls.push_back(g->seq({g->lit("<|open|>call tool=\"" + text::xtml_escape(name) + "\" index=\""),
                              index_digits(*g), g->lit("\"<|sep|>"), k3_arguments(*g, sc, params, path),
                              g->lit("<|close|>call<|sep|>")}));
    } else if (fam == "gpt_oss") {  // the <|call|> stop token follows, once the arguments are complete
      calls.push_back(g->seq({g->lit("<|channel|>commentary to=functions." + name + " <|constrain|>json<|message|>"),
                              args}));
    } else {
      throw ApiError(400, "invalid_request_error", "tool_choice", "",
                     "this model's chat format has no tool-call syntax this server can enforce");
    }
  }
  const Grammar::Id one = g->alt(calls);  // (call indices are written as any small non-negative integer)
  const Grammar::Id sep = fam == "qwen3" ? g->lit("\n") : g->lit("");
  // Harmony calls one tool per turn.
  const Grammar::Id many = g->repeat(one, 1, parallel && fam != "gpt_oss" ? -1 : 1, sep);
  std::vector<Grammar::Id> root;
  if (syn.starts_in_reasoning) root.push_back(g->seq({g->text(reasoning_bytes), g->lit(syn.think_end)}));
  if (fam == "gpt_oss") {
    // Reasoning in the analysis channel may come first; the call is the next message.
    const Grammar::Id next = g->lit("<|start|>assistant");
    if (syn.starts_in_reasoning) root.push_back(next);
    else
      root.push_back(g->alt({g->seq({g->lit(syn.think_begin), g->text(reasoning_bytes), g->lit(syn.think_end), next}),
                             g->lit("")}));
    root.push_back(many);
  } else if (fam == "deepseek_v3")
    root.insert(root.end(), {g->lit("<｜tool▁calls▁begin｜>"), many, g->lit("<｜tool▁calls▁end｜>")});
  else if (fam == "kimi_k2")
    root.insert(root.end(), {g->lit("<|tool_calls_section_begin|>"), many, g->lit("<|tool_calls_section_end|>")});
  else if (fam == "kimi_k3")
    root.insert(root.end(), {g->lit("<|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"), many,
                             g->lit("<|close|>tools<|sep|><|close|>message<|sep|>")});
  else if (syn.starts_in_reasoning)
    root.insert(root.end(), {g->lit("\n\n"), many});
  else
    root.push_back(many);
  g->set_root(g->seq(root));
  return g;
}

}  // namespace sluice::chat
