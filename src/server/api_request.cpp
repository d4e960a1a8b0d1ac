#include "server/api_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "chat/output_grammar.h"
#include "format/generation_config.h"
#include "server/error_body.h"
#include "server/freeform_tools.h"
#include "server/json_fields.h"
#include "util/json_depth.h"

namespace sluice::server {

using chat::ApiError;
using chat::GenerationRequest;
using chat::bad_field;
using chat::json_object_grammar;
using chat::json_schema_grammar;
using fields::array_at;
using fields::boolean_at;
using fields::integer_in;
using fields::number_in;
using fields::object_at;
using fields::only_known;
using fields::present;
using fields::require;
using fields::require_present;
using fields::string_at;
using fields::type_name;

using nlohmann::json;

namespace {

// This parser's type errors name what came: "'stream' must be a boolean, got a string".
constexpr auto kGot = fields::Wording::WithGot;

// Fields shared by both endpoints.
void parse_common(const json& body, GenerationRequest& r, const RequestLimits& limits) {
  require(body, "model", "");
  r.model = string_at(body["model"], "model", kGot);

  r.sampling = limits.defaults;
  if (present(body, "n") && integer_in(body, "n", 1, std::numeric_limits<int64_t>::max()) != 1)
    bad_field("n", "only n=1 is supported");
  if (present(body, "temperature")) r.sampling.temperature = number_in(body, "temperature", 0, 2);
  if (present(body, "top_p")) {
    r.sampling.top_p = number_in(body, "top_p", 0, 1);
    if (r.sampling.top_p == 0) {  // only the most likely token survives
      r.sampling.top_p = 1;
      r.sampling.top_k = 1;
    }
  }
  if (present(body, "top_k")) {
    const int64_t k = integer_in(body, "top_k", -1, std::numeric_limits<int32_t>::max());
    if (r.sampling.top_k != 1) r.sampling.top_k = k < 0 ? 0 : k;  // -1: no limit (vLLM's spelling)
  }
  if (present(body, "min_p")) r.sampling.min_p = number_in(body, "min_p", 0, 1);
  r.sampling.seed = limits.default_seed;
  if (present(body, "seed")) {
    const json& s = body["seed"];
    if (!s.is_number_integer()) bad_field("seed", "'seed' must be an integer, got {}", type_name(s));
    r.sampling.seed = s.is_number_unsigned() ? s.get<uint64_t>() : uint64_t(s.get<int64_t>());
  }
  for (const char* k : {"frequency_penalty", "presence_penalty"})
    if (present(body, k) && number_in(body, k, -2, 2) != 0)
      bad_field(k, "'{}' is not supported: only 0 is accepted", k);
  if (present(body, "logit_bias")) {
    const json& lb = body["logit_bias"];
    object_at(lb, "logit_bias", kGot);
    for (const auto& [k, v] : lb.items()) {
      const std::string name = "logit_bias." + k;
      size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(k, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != k.size() || id < 0 || id >= limits.vocab)
        bad_field(name, "'logit_bias' keys must be token ids below {}, got '{}'", limits.vocab, k);
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < -100 || v.get<double>() > 100)
        bad_field(name, "'logit_bias' values must be numbers between -100 and 100");
      r.logit_bias[int32_t(id)] = v.get<float>();
    }
  }
  if (present(body, "stop")) {
    const json& s = body["stop"];
    if (s.is_string()) {
      r.stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      if (s.size() > 4) bad_field("stop", "'stop' takes at most 4 strings, got {}", s.size());
      for (size_t i = 0; i < s.size(); ++i) r.stop.push_back(string_at(s[i], fmt::format("stop[{}]", i), kGot));
    } else {
      bad_field("stop", "'stop' must be a string or an array of strings, got {}", type_name(s));
    }
    for (size_t i = 0; i < r.stop.size(); ++i)
      if (r.stop[i].empty()) bad_field("stop", "stop strings must not be empty");
  }
  if (present(body, "stream")) r.stream = boolean_at(body["stream"], "stream", kGot);
  if (present(body, "stream_options")) {
    const json& so = body["stream_options"];
    object_at(so, "stream_options", kGot);
    if (!r.stream) bad_field("stream_options", "'stream_options' is only allowed when 'stream' is true");
    only_known(so, {"include_usage", "include_obfuscation"}, "stream_options.");
    if (present(so, "include_usage")) r.include_usage = boolean_at(so["include_usage"], "stream_options.include_usage");
  }
  if (present(body, "user")) string_at(body["user"], "user", kGot);
  if (present(body, "metadata")) object_at(body["metadata"], "metadata", kGot);
}

int64_t token_limit(const json& body, const char* key) {
  return integer_in(body, key, 1, std::numeric_limits<int32_t>::max());
}

// message content -> string (text parts concatenated) or null.
json flatten_content(const json& c, const std::string& where, bool null_ok, bool assistant = false) {
  if (c.is_string()) return c;
  if (c.is_null()) {
    if (!null_ok) bad_field(where, "'{}' must not be null", where);
    return nullptr;
  }
  if (!c.is_array()) bad_field(where, "'{}' must be a string or an array of content parts, got {}", where, type_name(c));
  std::string text;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string pw = fmt::format("{}[{}]", where, i);
    const json& p = c[i];
    object_at(p, pw, kGot);
    require(p, "type", pw + ".");
    const std::string type = string_at(p["type"], pw + ".type", kGot);
    if (type == "refusal" && assistant) {  // an assistant's refusal replays as its text
      only_known(p, {"type", "refusal"}, pw + ".");
      text += string_at(p.value("refusal", json()), pw + ".refusal", kGot);
      continue;
    }
    if (type != "text")
      bad_field(pw + ".type", "content part type '{}' is not supported: this model takes text only", type);
    // The Agents SDK copies the fields of this server's reply message (role, refusal,
    // reasoning_content, tool_calls...) into the text part it sends back; in an
    // assistant's part those echoes are ignored (the message's own fields carry them).
    static const std::set<std::string> known = {"type", "text", "cache_control"};
    static const std::set<std::string> known_or_echoed = {"type",       "text",  "cache_control", "role",
                                                          "refusal",    "annotations", "reasoning_content",
                                                          "tool_calls", "audio", "function_call", "content"};
    only_known(p, assistant ? known_or_echoed : known, pw + ".");
    require(p, "text", pw + ".");
    text += string_at(p["text"], pw + ".text", kGot);
  }
  return text;
}

// One call of an assistant message's tool_calls (at `cw`), as a function call:
// a custom (freeform) tool's input becomes its {"input"} argument.
json assistant_tool_call(const json& c, const std::string& cw) {
  object_at(c, cw);
  only_known(c, {"id", "type", "function", "custom"}, cw + ".");
  require(c, "id", cw + ".");
  const std::string ctype = present(c, "type") ? string_at(c["type"], cw + ".type", kGot) : "function";
  if (ctype == "custom") {  // a freeform tool's call: its input text as the {"input"} argument
    if (!present(c, "custom") || !c["custom"].is_object())
      bad_field(cw + ".custom", "'{}.custom' must be an object", cw);
    only_known(c["custom"], {"name", "input"}, cw + ".custom.");
    return {{"id", string_at(c["id"], cw + ".id", kGot)},
            {"type", "function"},
            {"function",
             {{"name", string_at(c["custom"].value("name", json()), cw + ".custom.name", kGot)},
              {"arguments", freeform_arguments(string_at(c["custom"].value("input", json()),
                                                             cw + ".custom.input", kGot))}}}};
  }
  if (ctype != "function") bad_field(cw + ".type", "'{}.type' must be \"function\" or \"custom\"", cw);
  if (!c.contains("function") || !c["function"].is_object())
    bad_field(cw + ".function", "'{}.function' must be an object", cw);
  const json& f = c["function"];
  only_known(f, {"name", "arguments"}, cw + ".function.");
  require(f, "name", cw + ".function.");
  require(f, "arguments", cw + ".function.");
  return {{"id", string_at(c["id"], cw + ".id", kGot)},
          {"type", "function"},
          {"function",
           {{"name", string_at(f["name"], cw + ".function.name", kGot)},
            {"arguments", string_at(f["arguments"], cw + ".function.arguments", kGot)}}}};
}

json parse_messages(const json& body) {
  require(body, "messages", "");
  const json& ms = body["messages"];
  array_at(ms, "messages", kGot);
  if (ms.empty()) bad_field("messages", "'messages' must not be empty");
  json out = json::array();
  for (size_t i = 0; i < ms.size(); ++i) {
    const std::string w = fmt::format("messages[{}]", i);
    const json& m = ms[i];
    object_at(m, w, kGot);
    require(m, "role", w + ".");
    std::string role = string_at(m["role"], w + ".role", kGot);
    json o;
    if (role == "system" || role == "developer" || role == "user") {
      only_known(m, {"role", "content", "name"}, w + ".");
      require(m, "content", w + ".");
      o["role"] = role == "developer" ? "system" : role;
      o["content"] = flatten_content(m["content"], w + ".content", false);
    } else if (role == "assistant") {
      only_known(m, {"role", "content", "name", "tool_calls", "reasoning_content", "refusal", "annotations", "audio",
                     "function_call"},
                 w + ".");
      for (const char* k : {"audio", "function_call"})
        if (present(m, k)) bad_field(w + "." + k, "'{}.{}' is not supported", w, k);
      if (present(m, "annotations") && !(m["annotations"].is_array() && m["annotations"].empty()))
        bad_field(w + ".annotations", "'{}.annotations' is not supported", w);
      o["role"] = role;
      o["content"] = flatten_content(m.value("content", json()), w + ".content", true, true);
      // A refusal replays as the turn's text.
      if (present(m, "refusal") && (o["content"].is_null() || o["content"] == ""))
        o["content"] = string_at(m["refusal"], w + ".refusal", kGot);
      if (present(m, "reasoning_content"))
        o["reasoning_content"] = string_at(m["reasoning_content"], w + ".reasoning_content", kGot);
      if (present(m, "tool_calls")) {
        const json& tc = m["tool_calls"];
        array_at(tc, w + ".tool_calls");
        json calls = json::array();
        for (size_t j = 0; j < tc.size(); ++j) {
          calls.push_back(assistant_tool_call(tc[j], fmt::format("{}.tool_calls[{}]", w, j)));
        }
        if (!calls.empty()) o["tool_calls"] = calls;
      }
      if (o["content"].is_null() && !o.contains("tool_calls"))
        bad_field(w + ".content", "'{}.content' is required unless the message has tool_calls", w);
    } else if (role == "tool") {
      only_known(m, {"role", "content", "tool_call_id", "name"}, w + ".");
      require(m, "tool_call_id", w + ".");
      o["role"] = role;
      o["tool_call_id"] = string_at(m["tool_call_id"], w + ".tool_call_id", kGot);
      require(m, "content", w + ".");
      o["content"] = flatten_content(m["content"], w + ".content", false);
    } else if (role == "function") {
      bad_field(w + ".role", "'{}.role' \"function\" (deprecated) is not supported: send tool messages", w);
    } else {
      bad_field(w + ".role", "'{}.role' must be system, developer, user, assistant or tool, got '{}'", w, role);
    }
    if (present(m, "name")) o["name"] = string_at(m["name"], w + ".name", kGot);
    out.push_back(std::move(o));
  }
  return out;
}

bool valid_function_name(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

json parse_tools(const json& body, GenerationRequest& r) {
  const json& ts = body["tools"];
  array_at(ts, "tools", kGot);
  json out = json::array();
  for (size_t i = 0; i < ts.size(); ++i) {
    const std::string w = fmt::format("tools[{}]", i);
    const json& t = ts[i];
    object_at(t, w);
    const std::string type = t.contains("type") ? string_at(t["type"], w + ".type", kGot) : "";
    if (type == "custom") {  // a freeform tool: its input is text
      only_known(t, {"type", "custom"}, w + ".");
      if (!present(t, "custom") || !t["custom"].is_object()) bad_field(w + ".custom", "'{}.custom' must be an object", w);
      const json& c = t["custom"];
      only_known(c, {"name", "description", "format"}, w + ".custom.");
      const std::string name = string_at(c.value("name", json()), w + ".custom.name", kGot);
      if (!valid_function_name(name))
        bad_field(w + ".custom.name", "'{}.custom.name' must be 1-128 characters of a-z, A-Z, 0-9, _, - and .", w);
      if (present(c, "format")) {
        const json& f = c["format"];
        if (!f.is_object() || !f.contains("type") || (f["type"] != "text" && f["type"] != "grammar"))
          bad_field(w + ".custom.format", "'{}.custom.format' must be {{type: text}} or {{type: grammar, ...}}", w);
      }
      out.push_back(freeform_function(name, present(c, "description") ? string_at(c["description"], w + ".custom.description", kGot) : "",
                                      c.value("format", json())));
      r.freeform_tools.insert(name);
      continue;
    }
    only_known(t, {"type", "function"}, w + ".");
    if (type != "function") bad_field(w + ".type", "'{}.type' must be \"function\" or \"custom\"", w);
    if (!t.contains("function") || !t["function"].is_object())
      bad_field(w + ".function", "'{}.function' must be an object", w);
    const json& f = t["function"];
    only_known(f, {"name", "description", "parameters", "strict"}, w + ".function.");
    require(f, "name", w + ".function.");
    const std::string name = string_at(f["name"], w + ".function.name", kGot);
    if (!valid_function_name(name))
      bad_field(w + ".function.name", "'{}.function.name' must be 1-128 characters of a-z, A-Z, 0-9, _, - and .", w);
    if (present(f, "description")) string_at(f["description"], w + ".function.description", kGot);
    if (present(f, "parameters") && !f["parameters"].is_object())
      bad_field(w + ".function.parameters", "'{}.function.parameters' must be a JSON Schema object", w);
    // strict: the arguments are enforced against the whole schema when the call is forced
    // (tool_choice required or named); under "auto" a call is parsed, not constrained.
    if (present(f, "strict")) boolean_at(f["strict"], w + ".function.strict");
    if (f.value("strict", json()) == true) r.strict_tools.insert(name);
    json fo = {{"name", name}};
    if (present(f, "description")) fo["description"] = f["description"];
    if (present(f, "parameters")) fo["parameters"] = f["parameters"];
    out.push_back({{"type", "function"}, {"function", fo}});
  }
  return out;
}

}  // namespace

SamplingParams sampling_defaults(const std::string& model_dir) {
  SamplingParams p;
  const auto g = generation_defaults(model_dir);
  if (!g) return p;
  if (!g->do_sample.value_or(false)) {
    p.temperature = 0;
    return p;
  }
  p.temperature = g->temperature.value_or(1.0);
  if (p.temperature > 2) fail("{}/generation_config.json: temperature {} is above the API's 2", model_dir, p.temperature);
  p.top_p = g->top_p.value_or(1.0);
  if (p.top_p == 0) p.top_p = 1, p.top_k = 1;
  else p.top_k = g->top_k.value_or(50);
  p.min_p = g->min_p.value_or(0.0);
  return p;
}

json parse_json_body(std::string_view body) {
  json j;
  try {
    j = json::parse(body, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth)
        throw ApiError(400, "invalid_request_error", "", "",
                       fmt::format("request body is nested deeper than {} levels (the limit)", kMaxJsonDepth));
      return true;
    });
  } catch (const json::exception& e) {
    throw ApiError(400, "invalid_request_error", "", "",
                   fmt::format("request body is not valid JSON: {}", e.what()));
  }
  if (!j.is_object()) throw ApiError(400, "invalid_request_error", "", "", "request body must be a JSON object");
  return j;
}

GenerationRequest parse_chat_request(const json& body, const RequestLimits& limits, RequestNotes* notes) {
  RequestNotes scratch;
  if (!notes) notes = &scratch;
  // Fields about provider features this server does not have: accepted, without effect
  // (cache routing, tiers, storing for evals, predicted outputs, verbosity hints).
  static const std::set<std::string> ignored = {"prompt_cache_key", "prompt_cache_retention", "safety_identifier",
                                                "service_tier", "store", "prediction", "verbosity"};
  std::set<std::string> known = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p",
                                 "top_k", "min_p", "seed", "stop", "n", "stream", "stream_options", "logprobs",
                                 "top_logprobs", "response_format", "tools", "tool_choice", "parallel_tool_calls",
                                 "frequency_penalty", "presence_penalty", "logit_bias", "user", "metadata",
                                 "modalities", "reasoning_effort", "web_search_options", "functions", "function_call",
                                 "audio"};
  known.insert(ignored.begin(), ignored.end());
  only_known(body, known, "");
  for (const auto& k : ignored)
    if (present(body, k.c_str()) && body[k] != json(false)) notes->ignore(k);
  for (const char* k : {"functions", "function_call"})
    if (present(body, k)) bad_field(k, "'{}' (deprecated) is not supported: send 'tools' and 'tool_choice'", k);
  if (present(body, "audio")) bad_field("audio", "'audio' output is not supported: this model writes text");
  // Web search is the provider's hosted tool: the model gets no search results here.
  if (present(body, "web_search_options")) notes->dropped_tools.push_back("web_search");
  GenerationRequest r;
  r.kind = GenerationRequest::Kind::Chat;
  parse_common(body, r, limits);
  if (present(body, "stream_options") && present(body["stream_options"], "include_obfuscation"))
    notes->ignore("stream_options.include_obfuscation");
  r.messages = parse_messages(body);
  if (present(body, "max_tokens")) r.max_tokens = token_limit(body, "max_tokens");
  if (present(body, "max_completion_tokens")) {
    const int64_t m = token_limit(body, "max_completion_tokens");
    if (r.max_tokens && *r.max_tokens != m)
      bad_field("max_completion_tokens", "'max_tokens' and 'max_completion_tokens' disagree; send one of them");
    r.max_tokens = m;
  }
  if (present(body, "logprobs")) r.logprobs = boolean_at(body["logprobs"], "logprobs", kGot);
  if (present(body, "top_logprobs")) {
    r.top_logprobs = int(integer_in(body, "top_logprobs", 0, 20));
    if (!r.logprobs) bad_field("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
  }
  r.sampling.top_logprobs = r.top_logprobs;
  if (present(body, "response_format")) {
    const json& rf = body["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      bad_field("response_format", "'response_format' must be an object with a string 'type'");
    const std::string t = rf["type"].get<std::string>();
    if (t == "json_object") {
      only_known(rf, {"type"}, "response_format.");
      r.json_object = true;
      r.grammar = json_object_grammar();
    } else if (t == "json_schema") {
      only_known(rf, {"type", "json_schema"}, "response_format.");
      if (!present(rf, "json_schema") || !rf["json_schema"].is_object())
        bad_field("response_format.json_schema", "'response_format.json_schema' must be an object");
      const json& js = rf["json_schema"];
      only_known(js, {"name", "description", "schema", "strict"}, "response_format.json_schema.");
      require_present(js, "name", "response_format.json_schema.");
      string_at(js["name"], "response_format.json_schema.name", kGot);
      if (present(js, "description")) string_at(js["description"], "response_format.json_schema.description", kGot);
      if (present(js, "strict")) boolean_at(js["strict"], "response_format.json_schema.strict");
      // Enforced whether or not strict is set: the reply always matches the schema.
      r.grammar = json_schema_grammar(present(js, "schema") ? js["schema"] : json::object(),
                                      "response_format.json_schema.schema");
    } else if (t != "text") {
      bad_field("response_format.type",
                "response_format type '{}' is not supported (text, json_object and json_schema are)", t);
    } else {
      only_known(rf, {"type"}, "response_format.");
    }
  }
  if (present(body, "modalities")) {
    const json& m = body["modalities"];
    if (m != json::array({"text"})) bad_field("modalities", "only the \"text\" modality is supported");
  }
  std::string choice = "auto";
  std::set<std::string> allowed_names;  // tool_choice allowed_tools
  bool restrict_tools = false;
  if (present(body, "tool_choice")) {
    const json& tc = body["tool_choice"];
    if (tc.is_string()) {
      choice = tc.get<std::string>();
      if (choice != "auto" && choice != "none" && choice != "required")
        bad_field("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or a function, got \"{}\"",
                  choice);
      if (choice == "required") r.tool_choice = GenerationRequest::ToolChoice::Required;
    } else if (tc.is_object()) {
      const std::string type = present(tc, "type") ? string_at(tc["type"], "tool_choice.type", kGot) : "";
      if (type == "allowed_tools") {
        // Only these tools may be called: the others are not declared to the model;
        // mode "required" forces a call of one of them.
        only_known(tc, {"type", "allowed_tools"}, "tool_choice.");
        if (!present(tc, "allowed_tools") || !tc["allowed_tools"].is_object())
          bad_field("tool_choice.allowed_tools", "'tool_choice.allowed_tools' must be an object");
        const json& at = tc["allowed_tools"];
        only_known(at, {"mode", "tools"}, "tool_choice.allowed_tools.");
        const std::string mode = string_at(at.value("mode", json()), "tool_choice.allowed_tools.mode", kGot);
        if (mode != "auto" && mode != "required")
          bad_field("tool_choice.allowed_tools.mode", "'tool_choice.allowed_tools.mode' must be auto or required");
        if (!present(at, "tools") || !at["tools"].is_array())
          bad_field("tool_choice.allowed_tools.tools", "'tool_choice.allowed_tools.tools' must be an array");
        for (size_t i = 0; i < at["tools"].size(); ++i) {
          const std::string w = fmt::format("tool_choice.allowed_tools.tools[{}]", i);
          const json& e = at["tools"][i];
          object_at(e, w);
          const std::string et = string_at(e.value("type", json()), w + ".type", kGot);
          if ((et != "function" && et != "custom") || !present(e, et.c_str()) || !e[et].is_object())
            bad_field(w, "'{}' must be {{type: function, function: {{name}}}} or {{type: custom, custom: {{name}}}}", w);
          allowed_names.insert(string_at(e[et].value("name", json()), w + "." + et + ".name", kGot));
        }
        restrict_tools = true;
        choice = mode;
        if (mode == "required") r.tool_choice = GenerationRequest::ToolChoice::Required;
      } else {
        if (type != "function" && type != "custom")
          bad_field("tool_choice.type", "'tool_choice.type' must be \"function\", \"custom\" or \"allowed_tools\"");
        only_known(tc, {"type", type}, "tool_choice.");
        if (!present(tc, type.c_str()) || !tc[type].is_object())
          bad_field("tool_choice." + type, "'tool_choice.{}' must be an object with the tool's name", type);
        only_known(tc[type], {"name"}, "tool_choice." + type + ".");
        require_present(tc[type], "name", "tool_choice." + type + ".");
        r.tool_choice = GenerationRequest::ToolChoice::Named;
        r.tool_choice_name = string_at(tc[type]["name"], "tool_choice." + type + ".name", kGot);
      }
    } else {
      bad_field("tool_choice", "'tool_choice' must be a string, got {}", type_name(tc));
    }
  }
  if (present(body, "parallel_tool_calls")) r.parallel_tool_calls = boolean_at(body["parallel_tool_calls"], "parallel_tool_calls", kGot);
  if (present(body, "reasoning_effort")) {
    r.reasoning_effort = string_at(body["reasoning_effort"], "reasoning_effort", kGot);
    static const std::set<std::string> efforts = {"none", "low", "medium", "high", "max"};
    if (!efforts.count(r.reasoning_effort))
      bad_field("reasoning_effort", "'reasoning_effort' must be none, low, medium, high or max, got '{}'",
                r.reasoning_effort);
  }
  if (present(body, "tools")) {
    json tools = parse_tools(body, r);
    if (restrict_tools) {
      for (const auto& n : allowed_names)
        if (std::none_of(tools.begin(), tools.end(), [&](const json& t) { return t["function"]["name"] == n; }))
          bad_field("tool_choice.allowed_tools.tools", "'tool_choice.allowed_tools.tools' names '{}', which is not one of 'tools'", n);
      json kept = json::array();
      for (auto& t : tools)
        if (allowed_names.count(t["function"]["name"].get<std::string>())) kept.push_back(std::move(t));
      tools = std::move(kept);
    }
    if (!tools.empty() && choice != "none") r.tools = std::move(tools);
  }
  if (r.tool_choice != GenerationRequest::ToolChoice::Auto) {
    if (!r.tools.is_array())
      bad_field("tool_choice", "'tool_choice' {} needs 'tools'", choice == "required" ? "\"required\"" : "a function");
    if (r.tool_choice == GenerationRequest::ToolChoice::Named &&
        std::none_of(r.tools.begin(), r.tools.end(), [&](const json& t) { return t["function"]["name"] == r.tool_choice_name; }))
      bad_field("tool_choice.function.name", "'tool_choice.function.name' '{}' is not one of 'tools'", r.tool_choice_name);
    if (r.grammar)
      bad_field("response_format", "a forced tool call and a structured response_format cannot both be enforced");
  }
  return r;
}

GenerationRequest parse_completion_request(const json& body, const RequestLimits& limits) {
  only_known(body,
             {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "n", "best_of",
              "stream", "stream_options", "logprobs", "echo", "suffix", "frequency_penalty", "presence_penalty",
              "logit_bias", "user", "metadata", "store"},
             "");
  GenerationRequest r;
  r.kind = GenerationRequest::Kind::Completion;
  parse_common(body, r, limits);
  require(body, "prompt", "");
  const json& p = body["prompt"];
  auto ids = [&](const json& a, const std::string& where) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < a.size(); ++i) {
      const json& t = a[i];
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= limits.vocab ||
          (t.is_number_unsigned() && t.get<uint64_t>() >= uint64_t(limits.vocab)))
        bad_field(where, "'{}[{}]' must be a token id below {}, got {}", where, i, limits.vocab, t.dump());
      out.push_back(t.get<int32_t>());
    }
    if (out.empty()) bad_field(where, "'{}' must not be empty", where);
    return out;
  };
  if (p.is_string()) {
    r.prompt_text = p.get<std::string>();
  } else if (p.is_array() && !p.empty() && p[0].is_string()) {
    if (p.size() != 1) bad_field("prompt", "only one prompt per request is supported, got {}", p.size());
    r.prompt_text = p[0].get<std::string>();
  } else if (p.is_array() && !p.empty() && p[0].is_array()) {
    if (p.size() != 1) bad_field("prompt", "only one prompt per request is supported, got {}", p.size());
    r.prompt_ids = ids(p[0], "prompt[0]");
    r.prompt_is_ids = true;
  } else if (p.is_array()) {
    r.prompt_ids = ids(p, "prompt");
    r.prompt_is_ids = true;
  } else {
    bad_field("prompt", "'prompt' must be a string, an array of token ids, or a one-element array of either");
  }
  // 0 is prompt scoring (with echo): the prompt back, with its tokens' logprobs when asked, nothing generated.
  r.max_tokens = present(body, "max_tokens") ? integer_in(body, "max_tokens", 0, std::numeric_limits<int32_t>::max())
                                              : 16;  // OpenAI's default
  if (present(body, "best_of") && integer_in(body, "best_of", 1, std::numeric_limits<int64_t>::max()) != 1)
    bad_field("best_of", "only best_of=1 is supported");
  if (present(body, "logprobs")) {
    r.logprobs = true;
    r.top_logprobs = int(integer_in(body, "logprobs", 0, 5));
    r.sampling.top_logprobs = r.top_logprobs;
  }
  if (present(body, "echo")) r.echo = boolean_at(body["echo"], "echo", kGot);
  if (*r.max_tokens == 0 && !r.echo)
    bad_field("max_tokens", "'max_tokens' 0 returns nothing without 'echo' (prompt scoring is echo + logprobs + max_tokens 0)");
  if (*r.max_tokens == 0 && r.stream && r.logprobs)
    bad_field("stream", "prompt scoring (max_tokens 0 with logprobs) is not streamed: send it without 'stream'");
  if (present(body, "suffix")) bad_field("suffix", "'suffix' (fill-in-the-middle) is not supported");
  return r;
}

}  // namespace sluice::server
