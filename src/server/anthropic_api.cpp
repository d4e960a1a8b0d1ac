#include "server/anthropic_api.h"

#include <set>

#include "server/response.h"

namespace sluice::server {

using chat::ApiError;
using chat::LogprobEntry;
using chat::Outcome;
using chat::ReplyDelta;
using chat::Request;
using chat::bad_field;

using nlohmann::json;

namespace {

bool present(const json& b, const char* k) { return b.contains(k) && !b[k].is_null(); }

void only_known(const json& obj, const std::set<std::string>& known, const std::string& prefix) {
  for (const auto& [k, v] : obj.items())
    if (!known.count(k)) bad_field(prefix + k, "unknown field '{}{}': this server does not support it", prefix, k);
}

std::string str(const json& v, const std::string& where) {
  if (!v.is_string()) bad_field(where, "'{}' must be a string", where);
  return v.get<std::string>();
}

// A string, or text blocks concatenated.
std::string text_content(const json& c, const std::string& where) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad_field(where, "'{}' must be a string or an array of content blocks", where);
  std::string s;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string w = fmt::format("{}[{}]", where, i);
    if (!c[i].is_object() || !c[i].contains("type") || c[i]["type"] != "text")
      bad_field(w + ".type", "'{}' must be a text block here", w);
    only_known(c[i], {"type", "text", "cache_control", "citations"}, w + ".");
    s += str(c[i].value("text", json()), w + ".text");
  }
  return s;
}

json parse_messages(const json& body, const json& system) {
  json out = json::array();
  if (!system.is_null()) out.push_back({{"role", "system"}, {"content", text_content(system, "system")}});
  if (!present(body, "messages") || !body["messages"].is_array() || body["messages"].empty())
    bad_field("messages", "'messages' must be a non-empty array");
  const json& ms = body["messages"];
  for (size_t i = 0; i < ms.size(); ++i) {
    const std::string w = fmt::format("messages[{}]", i);
    const json& m = ms[i];
    if (!m.is_object()) bad_field(w, "'{}' must be an object", w);
    only_known(m, {"role", "content"}, w + ".");
    const std::string role = str(m.value("role", json()), w + ".role");
    if (role != "user" && role != "assistant") bad_field(w + ".role", "'{}.role' must be user or assistant", w);
    if (!m.contains("content")) bad_field(w + ".content", "'{}.content' is required", w);
    const json& c = m["content"];
    if (c.is_string()) {
      out.push_back({{"role", role}, {"content", c}});
      continue;
    }
    if (!c.is_array()) bad_field(w + ".content", "'{}.content' must be a string or an array of content blocks", w);
    std::string text, thinking;
    json calls = json::array();
    for (size_t j = 0; j < c.size(); ++j) {
      const std::string bw = fmt::format("{}.content[{}]", w, j);
      const json& b = c[j];
      if (!b.is_object() || !b.contains("type")) bad_field(bw + ".type", "'{}' needs a type", bw);
      const std::string type = str(b["type"], bw + ".type");
      if (type == "text") {
        only_known(b, {"type", "text", "cache_control", "citations"}, bw + ".");
        text += str(b.value("text", json()), bw + ".text");
      } else if (type == "thinking" && role == "assistant") {
        only_known(b, {"type", "thinking", "signature"}, bw + ".");
        thinking += str(b.value("thinking", json()), bw + ".thinking");
      } else if (type == "redacted_thinking" && role == "assistant") {
        only_known(b, {"type", "data"}, bw + ".");  // opaque to this server: nothing to replay
      } else if (type == "tool_use" && role == "assistant") {
        only_known(b, {"type", "id", "name", "input", "cache_control"}, bw + ".");
        if (!present(b, "input") || !b["input"].is_object()) bad_field(bw + ".input", "'{}.input' must be an object", bw);
        calls.push_back({{"id", str(b.value("id", json()), bw + ".id")},
                         {"type", "function"},
                         {"function", {{"name", str(b.value("name", json()), bw + ".name")}, {"arguments", b["input"].dump()}}}});
      } else if (type == "tool_result" && role == "user") {
        only_known(b, {"type", "tool_use_id", "content", "is_error", "cache_control"}, bw + ".");
        if (!text.empty()) {
          out.push_back({{"role", "user"}, {"content", text}});
          text.clear();
        }
        std::string result = b.contains("content") ? text_content(b["content"], bw + ".content") : "";
        if (present(b, "is_error") && b["is_error"] == true) result = "Error: " + result;
        out.push_back({{"role", "tool"}, {"tool_call_id", str(b.value("tool_use_id", json()), bw + ".tool_use_id")},
                       {"content", result}});
      } else {
        bad_field(bw + ".type", "content block type '{}' is not supported in a {} message", type, role);
      }
    }
    if (role == "assistant") {
      json o = {{"role", "assistant"}, {"content", text.empty() && !calls.empty() ? json() : json(text)}};
      if (!thinking.empty()) o["reasoning_content"] = thinking;
      if (!calls.empty()) o["tool_calls"] = calls;
      out.push_back(std::move(o));
    } else if (!text.empty() || out.empty() || out.back()["role"] != "tool") {
      out.push_back({{"role", "user"}, {"content", text}});
    }
  }
  return out;
}

bool valid_tool_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

}  // namespace

Request parse_anthropic_request(const json& body, const RequestLimits& limits, bool count_tokens) {
  std::set<std::string> known = {"model", "messages", "system", "tools", "tool_choice", "thinking"};
  if (!count_tokens)
    known.insert({"max_tokens", "stop_sequences", "temperature", "top_p", "top_k", "metadata", "stream", "service_tier"});
  only_known(body, known, "");
  Request r;
  r.kind = Request::Kind::Chat;
  r.sampling = limits.defaults;
  r.sampling.seed = limits.default_seed;
  if (!present(body, "model")) bad_field("model", "'model' is required");
  r.model = str(body["model"], "model");
  r.messages = parse_messages(body, present(body, "system") ? body["system"] : json());
  if (!count_tokens) {
    if (!present(body, "max_tokens") || !body["max_tokens"].is_number_integer() || body["max_tokens"].get<int64_t>() < 1 ||
        body["max_tokens"].get<int64_t>() > (int64_t(1) << 30))
      bad_field("max_tokens", "'max_tokens' is required: an integer of at least 1");
    r.max_tokens = body["max_tokens"].get<int64_t>();
    auto number = [&](const char* k, double lo, double hi) {
      if (!body[k].is_number() || body[k].get<double>() < lo || body[k].get<double>() > hi)
        bad_field(k, "'{}' must be a number between {} and {}", k, lo, hi);
      return body[k].get<double>();
    };
    if (present(body, "temperature")) r.sampling.temperature = number("temperature", 0, 1);
    if (present(body, "top_p")) r.sampling.top_p = number("top_p", 0, 1);
    if (r.sampling.top_p == 0) r.sampling.top_p = 1, r.sampling.top_k = 1;
    if (present(body, "top_k")) {
      if (!body["top_k"].is_number_integer() || body["top_k"].get<int64_t>() < 0)
        bad_field("top_k", "'top_k' must be a non-negative integer");
      r.sampling.top_k = body["top_k"].get<int64_t>();
    }
    if (present(body, "stop_sequences")) {
      const json& s = body["stop_sequences"];
      if (!s.is_array() || s.size() > 16) bad_field("stop_sequences", "'stop_sequences' must be an array of at most 16 strings");
      for (size_t i = 0; i < s.size(); ++i) {
        r.stop.push_back(str(s[i], fmt::format("stop_sequences[{}]", i)));
        if (r.stop.back().empty()) bad_field(fmt::format("stop_sequences[{}]", i), "stop sequences must not be empty");
      }
    }
    if (present(body, "metadata")) {
      if (!body["metadata"].is_object()) bad_field("metadata", "'metadata' must be an object");
      only_known(body["metadata"], {"user_id"}, "metadata.");
    }
    if (present(body, "stream")) {
      if (!body["stream"].is_boolean()) bad_field("stream", "'stream' must be a boolean");
      r.stream = body["stream"].get<bool>();
    }
    if (present(body, "service_tier")) str(body["service_tier"], "service_tier");
  }
  if (present(body, "thinking")) {
    const json& t = body["thinking"];
    if (!t.is_object()) bad_field("thinking", "'thinking' must be an object");
    only_known(t, {"type", "budget_tokens"}, "thinking.");
    const std::string type = str(t.value("type", json()), "thinking.type");
    if (type != "enabled" && type != "disabled") bad_field("thinking.type", "'thinking.type' must be enabled or disabled");
    r.reasoning_effort = type == "enabled" ? "max" : "none";
  }
  std::string choice = "auto";
  bool parallel = true;
  if (present(body, "tool_choice")) {
    const json& tc = body["tool_choice"];
    if (!tc.is_object()) bad_field("tool_choice", "'tool_choice' must be an object");
    only_known(tc, {"type", "name", "disable_parallel_tool_use"}, "tool_choice.");
    choice = str(tc.value("type", json()), "tool_choice.type");
    if (choice != "auto" && choice != "any" && choice != "tool" && choice != "none")
      bad_field("tool_choice.type", "'tool_choice.type' must be auto, any, tool or none");
    if (choice == "tool") r.tool_choice_name = str(tc.value("name", json()), "tool_choice.name");
    if (present(tc, "disable_parallel_tool_use")) {
      if (!tc["disable_parallel_tool_use"].is_boolean())
        bad_field("tool_choice.disable_parallel_tool_use", "'tool_choice.disable_parallel_tool_use' must be a boolean");
      parallel = !tc["disable_parallel_tool_use"].get<bool>();
    }
  }
  r.parallel_tool_calls = parallel;
  if (present(body, "tools")) {
    const json& ts = body["tools"];
    if (!ts.is_array()) bad_field("tools", "'tools' must be an array");
    json tools = json::array();
    for (size_t i = 0; i < ts.size(); ++i) {
      const std::string w = fmt::format("tools[{}]", i);
      const json& t = ts[i];
      if (!t.is_object()) bad_field(w, "'{}' must be an object", w);
      if (present(t, "type") && t["type"] != "custom")
        bad_field(w + ".type", "'{}.type': only client tools with an input_schema are supported", w);
      only_known(t, {"type", "name", "description", "input_schema", "cache_control"}, w + ".");
      const std::string name = str(t.value("name", json()), w + ".name");
      if (!valid_tool_name(name)) bad_field(w + ".name", "'{}.name' must be 1-64 characters of a-z, A-Z, 0-9, _ and -", w);
      if (!present(t, "input_schema") || !t["input_schema"].is_object())
        bad_field(w + ".input_schema", "'{}.input_schema' must be a JSON Schema object", w);
      json f = {{"name", name}, {"parameters", t["input_schema"]}};
      if (present(t, "description")) f["description"] = str(t["description"], w + ".description");
      tools.push_back({{"type", "function"}, {"function", f}});
    }
    if (!tools.empty() && choice != "none") r.tools = std::move(tools);
  }
  if (choice == "any" || choice == "tool") {
    if (!r.tools.is_array()) bad_field("tool_choice", "tool_choice '{}' needs 'tools'", choice);
    r.tool_choice = choice == "any" ? Request::ToolChoice::Required : Request::ToolChoice::Named;
    if (choice == "tool" &&
        std::none_of(r.tools.begin(), r.tools.end(), [&](const json& t) { return t["function"]["name"] == r.tool_choice_name; }))
      bad_field("tool_choice.name", "'tool_choice.name' '{}' is not one of 'tools'", r.tool_choice_name);
  }
  return r;
}

json anthropic_error_body(const ApiError& e) {
  std::string type = e.type();
  if (e.status() == 401) type = "authentication_error";
  else if (e.status() == 404) type = "not_found_error";
  else if (e.status() == 429) type = "rate_limit_error";
  else if (e.status() == 503) type = "overloaded_error";
  else if (e.status() >= 500) type = "api_error";
  else type = "invalid_request_error";
  return {{"type", "error"}, {"error", {{"type", type}, {"message", e.what()}}}};
}

namespace {

std::string event(const char* name, const json& data) {
  return std::string("event: ") + name + "\ndata: " + to_text(data) + "\n\n";
}

const char* stop_reason(const Outcome& o, bool stop_sequence) {
  if (o.finish_reason == "tool_calls") return "tool_use";
  if (o.finish_reason == "length") return "max_tokens";
  return stop_sequence ? "stop_sequence" : "end_turn";
}

class AnthropicWriter : public ReplyWriter {
 public:
  AnthropicWriter(const Request& req, std::string id, std::string model, int64_t prompt_tokens)
      : req_(req), id_(std::move(id)), model_(std::move(model)), prompt_tokens_(prompt_tokens) {}
  bool streaming() const override { return req_.stream; }
  std::string keep_alive() const override { return streaming() ? event("ping", {{"type", "ping"}}) : " "; }
  std::string begin() override {
    if (!req_.stream) return "";
    json msg = {{"id", id_},       {"type", "message"},       {"role", "assistant"},
                {"model", model_}, {"content", json::array()}, {"stop_reason", nullptr},
                {"stop_sequence", nullptr},
                {"usage", {{"input_tokens", prompt_tokens_}, {"output_tokens", 0}}}};
    return event("message_start", {{"type", "message_start"}, {"message", msg}}) + event("ping", {{"type", "ping"}});
  }
  std::string delta(const ReplyDelta& d, const std::vector<LogprobEntry>&) override {
    std::string out;
    if (!d.reasoning.empty()) out += text_into("thinking", d.reasoning);
    if (!d.content.empty()) out += text_into("text", d.content);
    for (const auto& c : d.tool_calls) {
      out += close_block();
      json input = json::parse(c.arguments, nullptr, false);
      if (!input.is_object()) input = json{{"_raw", c.arguments}};  // a call whose arguments are not an object
      const std::string id = "toolu_" + c.id.substr(c.id.find('_') + 1);
      blocks_.push_back({{"type", "tool_use"}, {"id", id}, {"name", c.name}, {"input", input}});
      if (req_.stream) {
        out += event("content_block_start", {{"type", "content_block_start"}, {"index", blocks_.size() - 1},
                                             {"content_block", {{"type", "tool_use"}, {"id", id}, {"name", c.name}, {"input", json::object()}}}});
        out += event("content_block_delta", {{"type", "content_block_delta"}, {"index", blocks_.size() - 1},
                                             {"delta", {{"type", "input_json_delta"}, {"partial_json", input.dump()}}}});
        open_ = true;
      }
      out += close_block();
    }
    return req_.stream ? out : "";
  }
  std::string end(const Outcome& o) override {
    const bool by_stop = o.finish_reason == "stop" && !req_.stop.empty();
    if (!req_.stream) {
      json content = json::array();
      for (auto& b : blocks_) {
        if (b["type"] == "thinking") b["signature"] = "";
        content.push_back(b);
      }
      return to_text({{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_},
                      {"content", content}, {"stop_reason", stop_reason(o, by_stop)}, {"stop_sequence", nullptr},
                      {"usage", usage(o)}});
    }
    std::string out = close_block();
    out += event("message_delta", {{"type", "message_delta"},
                                   {"delta", {{"stop_reason", stop_reason(o, by_stop)}, {"stop_sequence", nullptr}}},
                                   {"usage", usage(o)}});
    return out + event("message_stop", {{"type", "message_stop"}});
  }
  std::string error(const std::string& message, const std::string&, const std::string&) override {
    const json e = {{"type", "error"}, {"error", {{"type", "api_error"}, {"message", message}}}};
    return req_.stream ? event("error", e) : to_text(e);
  }

 private:
  json usage(const Outcome& o) const {
    return {{"input_tokens", o.prompt_tokens - o.cached_tokens},
            {"cache_read_input_tokens", o.cached_tokens},
            {"output_tokens", o.completion_tokens}};
  }
  // Appends text to the open block of that type, opening one (and closing another) as needed.
  std::string text_into(const char* type, const std::string& text) {
    std::string out;
    if (!open_ || blocks_.back()["type"] != type) {
      out += close_block();
      json b = {{"type", type}, {type, ""}};
      blocks_.push_back(b);
      if (req_.stream) {
        json start = b;
        if (std::string(type) == "thinking") start["signature"] = "";
        out += event("content_block_start",
                     {{"type", "content_block_start"}, {"index", blocks_.size() - 1}, {"content_block", start}});
      }
      open_ = true;
    }
    blocks_.back()[type] = blocks_.back()[type].get<std::string>() + text;
    if (req_.stream) {
      const bool thinking = std::string(type) == "thinking";
      out += event("content_block_delta", {{"type", "content_block_delta"}, {"index", blocks_.size() - 1},
                                           {"delta", {{"type", thinking ? "thinking_delta" : "text_delta"}, {type, text}}}});
    }
    return out;
  }
  std::string close_block() {
    if (!open_) return "";
    open_ = false;
    if (!req_.stream) return "";
    std::string out;
    if (blocks_.back()["type"] == "thinking")
      out += event("content_block_delta", {{"type", "content_block_delta"}, {"index", blocks_.size() - 1},
                                           {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
    return out + event("content_block_stop", {{"type", "content_block_stop"}, {"index", blocks_.size() - 1}});
  }

  const Request& req_;
  std::string id_, model_;
  int64_t prompt_tokens_;
  std::vector<json> blocks_;
  bool open_ = false;
};

}  // namespace

std::unique_ptr<ReplyWriter> make_anthropic_writer(const Request& req, std::string id, std::string model,
                                                   int64_t prompt_tokens) {
  return std::make_unique<AnthropicWriter>(req, std::move(id), std::move(model), prompt_tokens);
}

}  // namespace sluice::server
