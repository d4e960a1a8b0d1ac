#include "server/responses_api.h"

#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "chat/api_error.h"
#include "server/freeform_tools.h"
#include "server/json_fields.h"
#include "server/response.h"

namespace sluice::server {

using chat::bad_field;
using fields::array_at;
using fields::boolean_at;
using fields::object_at;
using fields::only_known;
using fields::present;
using fields::require;
using fields::require_present;
using fields::string_at;
using nlohmann::json;

namespace {

// Text parts -> one string. `types`: the part types this role may send.
std::string flatten_parts(const json& c, const std::string& where, const std::set<std::string>& types) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad_field(where, "'{}' must be a string or an array of content parts", where);
  std::string text;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string pw = fmt::format("{}[{}]", where, i);
    const json& p = object_at(c[i], pw);
    require_present(p, "type", pw + ".");
    const std::string type = string_at(p["type"], pw + ".type");
    if (!types.count(type))
      bad_field(pw + ".type", "content part type '{}' is not supported here: this model takes text only", type);
    if (type == "refusal") {
      only_known(p, {"type", "refusal"}, pw + ".");
      text += string_at(p.value("refusal", json()), pw + ".refusal");
      continue;
    }
    // output_text parts come back from this server's own replies with their annotations and logprobs.
    only_known(p, type == "output_text" ? std::set<std::string>{"type", "text", "annotations", "logprobs"}
                                        : std::set<std::string>{"type", "text"},
               pw + ".");
    require(p, "text", pw + ".");
    text += string_at(p["text"], pw + ".text");
  }
  return text;
}

// Reasoning item -> its text (content when given, else the summaries).
std::string reasoning_text(const json& item, const std::string& w) {
  only_known(item, {"type", "id", "summary", "content", "encrypted_content", "status"}, w + ".");
  if (present(item, "encrypted_content"))
    bad_field(w + ".encrypted_content", "'{}.encrypted_content' cannot be read: this server sends reasoning in the clear",
              w);
  std::string text;
  auto collect = [&](const char* key, const char* part_type) {
    if (!present(item, key)) return;
    const json& a = array_at(item[key], w + "." + key);
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string pw = fmt::format("{}.{}[{}]", w, key, i);
      const json& p = object_at(a[i], pw);
      only_known(p, {"type", "text"}, pw + ".");
      if (string_at(p.value("type", json()), pw + ".type") != part_type)
        bad_field(pw + ".type", "'{}.type' must be \"{}\"", pw, part_type);
      text += string_at(p.value("text", json()), pw + ".text");
    }
  };
  collect("content", "reasoning_text");
  if (text.empty()) collect("summary", "summary_text");
  else if (present(item, "summary") && !item["summary"].is_array())
    bad_field(w + ".summary", "'{}.summary' must be an array", w);
  return text;
}

// A function_call (or custom_tool_call, `custom`) input item -> a chat tool call.
json input_call(const json& item, const std::string& w, bool custom) {
  const char* body_key = custom ? "input" : "arguments";
  only_known(item, {"type", "id", "call_id", "name", body_key, "status", "namespace"}, w + ".");
  for (const char* k : {"call_id", "name", body_key})
    require(item, k, w + ".");
  // A function of a namespace group is known to the model as "NAMESPACE.NAME".
  std::string name = string_at(item["name"], w + ".name");
  if (present(item, "namespace")) name = string_at(item["namespace"], w + ".namespace") + "." + name;
  const std::string body = string_at(item[body_key], w + "." + body_key);
  return {{"id", string_at(item["call_id"], w + ".call_id")},
          {"type", "function"},
          {"function", {{"name", name}, {"arguments", custom ? freeform_arguments(body) : body}}}};
}

// input (a string or items) -> chat messages appended to `out`.
void convert_input(const json& input, json& out, RequestNotes* notes) {
  if (input.is_string()) {
    out.push_back({{"role", "user"}, {"content", input}});
    return;
  }
  if (!input.is_array()) bad_field("input", "'input' must be a string or an array of items");
  std::string reasoning;  // a reasoning item's text, replayed with the assistant turn after it
  bool in_assistant_turn = false;  // out.back() is this input's assistant turn (calls join it)
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string w = fmt::format("input[{}]", i);
    const json& item = object_at(input[i], w);
    const std::string type = present(item, "type") ? string_at(item["type"], w + ".type") : "message";
    if (type == "message") {
      only_known(item, {"type", "role", "content", "id", "status", "phase"}, w + ".");
      require_present(item, "role", w + ".");
      const std::string role = string_at(item["role"], w + ".role");
      require(item, "content", w + ".");
      if (role == "assistant") {
        const std::string text = flatten_parts(item["content"], w + ".content", {"output_text", "input_text", "refusal"});
        if (in_assistant_turn && reasoning.empty()) {
          // One reply's items (text and calls, in any order) are one assistant turn, as
          // chat completions and a stored response hold it: its text, then its calls.
          json& m = out.back();
          m["content"] = (m["content"].is_string() ? m["content"].get<std::string>() : std::string()) + text;
          continue;
        }
        json m = {{"role", "assistant"}, {"content", text}};
        if (!reasoning.empty()) m["reasoning_content"] = std::exchange(reasoning, "");
        out.push_back(std::move(m));
        in_assistant_turn = true;
        continue;
      }
      if (role != "user" && role != "system" && role != "developer")
        bad_field(w + ".role", "'{}.role' must be user, system, developer or assistant, got '{}'", w, role);
      out.push_back({{"role", role == "developer" ? "system" : role},
                     {"content", flatten_parts(item["content"], w + ".content", {"input_text"})}});
      in_assistant_turn = false;
    } else if (type == "function_call" || type == "custom_tool_call") {
      json call = input_call(item, w, type == "custom_tool_call");
      if (!in_assistant_turn || !reasoning.empty()) {
        json m = {{"role", "assistant"}, {"content", nullptr}};
        if (!reasoning.empty()) m["reasoning_content"] = std::exchange(reasoning, "");
        out.push_back(std::move(m));
        in_assistant_turn = true;
      }
      out.back()["tool_calls"].push_back(std::move(call));
    } else if (type == "function_call_output" || type == "custom_tool_call_output") {
      only_known(item, {"type", "id", "call_id", "output", "status"}, w + ".");
      require(item, "call_id", w + ".");
      require(item, "output", w + ".");
      out.push_back({{"role", "tool"},
                     {"tool_call_id", string_at(item["call_id"], w + ".call_id")},
                     {"content", flatten_parts(item["output"], w + ".output", {"input_text"})}});
      in_assistant_turn = false;
    } else if (type == "reasoning") {
      reasoning += reasoning_text(item, w);
    } else if (type == "web_search_call" || type == "file_search_call" || type == "image_generation_call" ||
               type == "code_interpreter_call" || type == "mcp_list_tools" || type == "mcp_call" ||
               type == "mcp_approval_request" || type == "mcp_approval_response" || type == "tool_search_call" ||
               type == "tool_search_output") {
      // The record of a hosted tool's run (the provider's): not replayable here; the
      // reply that followed it stays.
      if (notes) notes->ignore("input.hosted_tool_items");
    } else {
      bad_field(w + ".type",
                "input item type '{}' is not supported (message, function_call, function_call_output, "
                "custom_tool_call, custom_tool_call_output and reasoning are)",
                type);
    }
  }
}

// Responses tools -> chat tools: functions as they are, freeform (custom) tools in
// the chat API's custom form, namespace groups flattened to "NAMESPACE.NAME";
// hosted tools (web search, file search, code interpreter, MCP connectors, ...) are
// left out and named in `notes`.
json convert_tools(const json& ts, RequestNotes* notes, std::set<std::string>& namespaces) {
  array_at(ts, "tools");
  json out = json::array();
  std::function<void(const json&, const std::string&, const std::string&, const std::string&)> one =
      [&](const json& t, const std::string& w, const std::string& ns, const std::string& ns_desc) {
        object_at(t, w);
        require_present(t, "type", w + ".");
        const std::string type = string_at(t["type"], w + ".type");
        if (type == "function") {
          only_known(t, {"type", "name", "description", "parameters", "strict", "defer_loading"}, w + ".");
          if (notes && present(t, "defer_loading")) notes->ignore("tools.defer_loading");  // every tool is declared
          json f = json::object();
          for (const char* k : {"name", "description", "parameters", "strict"})
            if (present(t, k)) f[k] = t[k];
          require(f, "name", w + ".");
          if (!ns.empty()) {
            f["name"] = ns + "." + string_at(t["name"], w + ".name");
            if (!ns_desc.empty()) f["description"] = ns_desc + (f.contains("description") ? "\n\n" + string_at(f["description"], w + ".description") : "");
          }
          out.push_back({{"type", "function"}, {"function", std::move(f)}});
        } else if (type == "custom") {
          only_known(t, {"type", "name", "description", "format", "defer_loading"}, w + ".");
          if (notes && present(t, "defer_loading")) notes->ignore("tools.defer_loading");
          json c = json::object();
          for (const char* k : {"name", "description", "format"})
            if (present(t, k)) c[k] = t[k];
          require(c, "name", w + ".");
          if (!ns.empty()) c["name"] = ns + "." + string_at(t["name"], w + ".name");
          if (!ns.empty() && !ns_desc.empty())
            c["description"] = ns_desc + (c.contains("description") ? "\n\n" + string_at(c["description"], w + ".description") : "");
          out.push_back({{"type", "custom"}, {"custom", std::move(c)}});
        } else if (type == "namespace" && ns.empty()) {
          only_known(t, {"type", "name", "description", "tools"}, w + ".");
          const std::string name = string_at(t.value("name", json()), w + ".name");
          if (name.empty() || name.find('.') != std::string::npos)
            bad_field(w + ".name", "'{}.name' must be a non-empty name without '.'", w);
          const std::string desc = present(t, "description") ? string_at(t["description"], w + ".description") : "";
          if (!present(t, "tools") || !t["tools"].is_array()) bad_field(w + ".tools", "'{}.tools' must be an array", w);
          namespaces.insert(name);
          for (size_t i = 0; i < t["tools"].size(); ++i) one(t["tools"][i], fmt::format("{}.tools[{}]", w, i), name, desc);
        } else {
          static const std::set<std::string> hosted = {
              "web_search", "web_search_preview", "web_search_preview_2025_03_11", "web_search_2025_08_26",
              "file_search", "computer", "computer_use", "computer_use_preview", "code_interpreter",
              "image_generation", "mcp", "local_shell", "shell", "apply_patch", "tool_search"};
          if (!hosted.count(type) || !ns.empty())
            bad_field(w + ".type", "'{}.type' '{}' is not a tool type of the Responses API", w, type);
          // The provider's hosted tools: this server cannot run them.
          if (notes) notes->dropped_tools.push_back(present(t, "server_label") && t["server_label"].is_string()
                                                        ? "mcp:" + t["server_label"].get<std::string>()
                                                        : type);
        }
      };
  for (size_t i = 0; i < ts.size(); ++i) one(ts[i], fmt::format("tools[{}]", i), "", "");
  return out;
}

// A field name of the chat body built below -> the Responses field it came from.
std::string responses_param(const std::string& p) {
  static const std::vector<std::pair<std::string, std::string>> renames = {
      {"max_completion_tokens", "max_output_tokens"},
      {"response_format.json_schema.schema", "text.format.schema"},
      {"response_format.json_schema.", "text.format."},
      {"response_format.json_schema", "text.format"},
      {"response_format", "text.format"},
      {"reasoning_effort", "reasoning.effort"},
      {"tool_choice.function.", "tool_choice."},
      {"tool_choice.custom.", "tool_choice."},
      {"tool_choice.allowed_tools.", "tool_choice."},
  };
  // Items are checked here before the chat parser sees them; what it still finds is about the whole input.
  if (p.rfind("messages", 0) == 0) return "input";
  for (const auto& [from, to] : renames)
    if (p.rfind(from, 0) == 0) return to + p.substr(from.size());
  // tools[i].function.x -> tools[i].x
  if (p.rfind("tools[", 0) == 0) {
    const size_t f = p.find("].function");
    if (f != std::string::npos) return p.substr(0, f + 1) + p.substr(f + 10);
  }
  return p;
}

}  // namespace

ResponsesRequest parse_responses_request(const json& body, const RequestLimits& limits, const ResponseStore* store,
                                         RequestNotes* notes) {
  RequestNotes scratch;
  if (!notes) notes = &scratch;
  only_known(body,
             {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text", "reasoning",
              "max_output_tokens", "temperature", "top_p", "stream", "stream_options", "store", "metadata",
              "previous_response_id", "user", "safety_identifier", "prompt_cache_key", "prompt_cache_retention",
              "service_tier", "truncation", "include", "background", "conversation", "prompt", "max_tool_calls",
              "top_logprobs", "context_management", "client_metadata"},
             "");
  ResponsesRequest rr;
  json chat = json::object();
  if (body.contains("model")) chat["model"] = body["model"];
  // Accepted and without effect on a local server: who asks, cache routing hints, the tier.
  for (const char* k : {"safety_identifier", "prompt_cache_key", "prompt_cache_retention", "service_tier"})
    if (present(body, k)) {
      string_at(body[k], k);
      notes->ignore(k);
    }
  // Codex's client_metadata (window and turn ids) is for the provider's bookkeeping.
  if (present(body, "client_metadata")) {
    object_at(body["client_metadata"], "client_metadata");
    notes->ignore("client_metadata");
  }
  // Server-side compaction past a token threshold: the client compacts itself when
  // this server answers context_length_exceeded; max_tool_calls bounds hosted tools' calls.
  for (const char* k : {"context_management", "max_tool_calls"})
    if (present(body, k)) notes->ignore(k);
  for (const char* k : {"conversation", "prompt"})
    if (present(body, k)) bad_field(k, "'{}' is not supported by this server", k);
  if (present(body, "background") && body["background"] != json(false))
    bad_field("background", "'background' responses are not supported: only false");
  if (present(body, "top_logprobs") && body["top_logprobs"] != json(0))
    bad_field("top_logprobs", "'top_logprobs' is not supported on /v1/responses (use /v1/chat/completions)");
  if (present(body, "truncation") && body["truncation"] != json("disabled"))
    bad_field("truncation", "'truncation' must be \"disabled\": this server never drops input");
  if (present(body, "include")) {
    const json& inc = array_at(body["include"], "include");
    for (size_t i = 0; i < inc.size(); ++i) {
      const std::string w = fmt::format("include[{}]", i);
      const std::string v = string_at(inc[i], w);
      // Reasoning is always returned in the clear (no encrypted form to add); the rest
      // concern hosted tools' results and input images, which this server does not have.
      if (v == "message.output_text.logprobs") bad_field(w, "'{}' ('{}') is not supported", w, v);
      if (v != "reasoning.encrypted_content") notes->ignore("include");
    }
  }
  if (present(body, "store")) rr.store = boolean_at(body["store"], "store");
  if (present(body, "stream_options")) {
    const json& so = object_at(body["stream_options"], "stream_options");
    only_known(so, {"include_obfuscation"}, "stream_options.");
    if (present(so, "include_obfuscation")) boolean_at(so["include_obfuscation"], "stream_options.include_obfuscation");
    if (body.value("stream", json(false)) != json(true))
      bad_field("stream_options", "'stream_options' is only allowed when 'stream' is true");
  }
  for (const char* k : {"temperature", "top_p", "stream", "parallel_tool_calls", "user", "metadata"})
    if (present(body, k)) chat[k] = body[k];
  if (present(body, "max_output_tokens")) chat["max_completion_tokens"] = body["max_output_tokens"];

  // The conversation: the held response's, then this input; the instructions go first and are not kept.
  json messages = json::array();
  if (present(body, "previous_response_id")) {
    const std::string prev = string_at(body["previous_response_id"], "previous_response_id");
    auto held = store ? store->get(prev) : std::nullopt;
    if (!held)
      throw chat::ApiError(400, "invalid_request_error", "previous_response_id", "previous_response_not_found",
                           fmt::format("Previous response with id '{}' not found (this server holds the last {} "
                                       "stored responses, at most {} MiB)",
                                       prev, ResponseStore::kDefaultMaxResponses, ResponseStore::kDefaultMaxBytes >> 20));
    messages = held->conversation;
    rr.echo["previous_response_id"] = prev;
  } else {
    rr.echo["previous_response_id"] = nullptr;
  }
  require(body, "input", "");
  convert_input(body["input"], messages, notes);
  if (messages.empty()) bad_field("input", "'input' must not be empty");
  rr.conversation = messages;
  rr.echo["instructions"] = nullptr;
  if (present(body, "instructions")) {
    const std::string ins = string_at(body["instructions"], "instructions");
    messages.insert(messages.begin(), json{{"role", "system"}, {"content", ins}});
    rr.echo["instructions"] = ins;
  }
  chat["messages"] = std::move(messages);

  if (present(body, "tools")) chat["tools"] = convert_tools(body["tools"], notes, rr.namespaces);
  rr.echo["tools"] = present(body, "tools") ? body["tools"] : json::array();
  rr.echo["tool_choice"] = "auto";
  if (present(body, "tool_choice")) {
    const json& tc = body["tool_choice"];
    rr.echo["tool_choice"] = tc;
    if (tc.is_object()) {
      const std::string type = present(tc, "type") ? string_at(tc["type"], "tool_choice.type") : "";
      if (type == "function" || type == "custom") {
        only_known(tc, {"type", "name"}, "tool_choice.");
        require_present(tc, "name", "tool_choice.");
        chat["tool_choice"] = {{"type", type}, {type, {{"name", tc["name"]}}}};
      } else if (type == "allowed_tools") {
        only_known(tc, {"type", "mode", "tools"}, "tool_choice.");
        json tools = json::array();
        if (!present(tc, "tools") || !tc["tools"].is_array()) bad_field("tool_choice.tools", "'tool_choice.tools' must be an array");
        for (size_t i = 0; i < tc["tools"].size(); ++i) {
          const std::string w = fmt::format("tool_choice.tools[{}]", i);
          const json& e = object_at(tc["tools"][i], w);
          const std::string et = string_at(e.value("type", json()), w + ".type");
          if (et != "function" && et != "custom")
            bad_field(w + ".type", "'{}.type' '{}' names a tool this server does not have", w, et);
          tools.push_back({{"type", et}, {et, {{"name", string_at(e.value("name", json()), w + ".name")}}}});
        }
        chat["tool_choice"] = {{"type", "allowed_tools"}, {"allowed_tools", {{"mode", tc.value("mode", json())}, {"tools", tools}}}};
      } else {
        bad_field("tool_choice.type", "'tool_choice.type' '{}' names a hosted tool this server does not have", type);
      }
    } else {
      chat["tool_choice"] = tc;
    }
  }
  rr.echo["text"] = {{"format", {{"type", "text"}}}};
  if (present(body, "text")) {
    const json& t = object_at(body["text"], "text");
    only_known(t, {"format", "verbosity"}, "text.");
    // A hint some providers' models follow; replies here are not shaped by it.
    if (present(t, "verbosity") && t["verbosity"] != json("medium")) notes->ignore("text.verbosity");
    if (present(t, "format")) {
      const json& f = object_at(t["format"], "text.format");
      require_present(f, "type", "text.format.");
      const std::string type = string_at(f["type"], "text.format.type");
      if (type == "json_schema") {
        only_known(f, {"type", "name", "schema", "strict", "description"}, "text.format.");
        json js = f;
        js.erase("type");
        chat["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
      } else {
        only_known(f, {"type"}, "text.format.");
        chat["response_format"] = {{"type", type}};
      }
      rr.echo["text"]["format"] = f;
    }
  }
  rr.echo["reasoning"] = {{"effort", nullptr}, {"summary", nullptr}};
  if (present(body, "reasoning")) {
    const json& r = object_at(body["reasoning"], "reasoning");
    only_known(r, {"effort", "summary", "generate_summary"}, "reasoning.");
    // Summaries are not written: the reasoning item carries the whole reasoning text instead.
    for (const char* k : {"summary", "generate_summary"})
      if (present(r, k)) string_at(r[k], std::string("reasoning.") + k);
    if (present(r, "effort")) {
      std::string e = string_at(r["effort"], "reasoning.effort");
      rr.echo["reasoning"]["effort"] = e;
      // The Responses API's scale onto the chat field's (none, low, medium, high, max).
      if (e == "minimal") e = "low";
      else if (e == "xhigh") e = "max";
      chat["reasoning_effort"] = e;
    }
  }
  try {
    rr.req = parse_chat_request(chat, limits, notes);
  } catch (const chat::ApiError& e) {
    // Name the field the client sent, in the param and in the message.
    std::string msg = e.what();
    auto replace_all = [&msg](const std::string& from, const std::string& to) {
      for (size_t at = 0; !from.empty() && (at = msg.find(from, at)) != std::string::npos; at += to.size())
        msg.replace(at, from.size(), to);
    };
    const std::string p = responses_param(e.param());
    replace_all(e.param(), p);
    for (const char* chat_name : {"max_completion_tokens", "response_format", "reasoning_effort", "messages"})
      replace_all(chat_name, responses_param(chat_name));
    throw chat::ApiError(e.status(), e.type(), p, e.code(), msg);
  }
  for (const char* k : {"metadata", "user", "max_output_tokens"})
    rr.echo[k] = present(body, k) ? body[k] : json();
  if (!rr.echo["metadata"].is_object()) rr.echo["metadata"] = json::object();
  rr.echo["parallel_tool_calls"] = rr.req.parallel_tool_calls;
  rr.echo["temperature"] = rr.req.sampling.temperature;
  rr.echo["top_p"] = rr.req.sampling.top_p;
  rr.echo["store"] = rr.store;
  rr.echo["truncation"] = "disabled";
  for (const auto& t : notes->dropped_tools) rr.dropped_tools += (rr.dropped_tools.empty() ? "" : ", ") + t;
  return rr;
}

namespace {

// The Response object and its output items as the reply grows; the stream's events.
class ResponsesWriter : public ReplyWriter {
 public:
  ResponsesWriter(const ResponsesRequest& rr, ResponsesReplyInfo info, StoreFn on_done)
      : stream_(rr.req.stream),
        store_(rr.store),
        echo_(rr.echo),
        conversation_(rr.conversation),
        info_(std::move(info)),
        on_done_(std::move(on_done)),
        freeform_(rr.req.freeform_tools),
        namespaces_(rr.namespaces),
        dropped_tools_(rr.dropped_tools) {}

  bool streaming() const override { return stream_; }

  std::string begin() override {
    if (!stream_) return "";
    json r = response("in_progress", nullptr);
    std::string s = event("response.created", {{"response", r}});  // in this order: events are numbered
    return s + event("response.in_progress", {{"response", r}});
  }

  // Codex counts only events against its idle timeout (SSE comments are not events):
  // the keep-alive is the Responses API's own in_progress event.
  std::string keep_alive() override {
    if (!stream_) return " ";
    return event("response.in_progress", {{"response", response("in_progress", nullptr)}});
  }

  std::string delta(const chat::ReplyDelta& d, const std::vector<chat::LogprobEntry>&) override {
    std::string s;
    if (!d.reasoning.empty()) s += text_delta(Open::Reasoning, d.reasoning);
    if (!d.content.empty()) s += text_delta(Open::Message, d.content);
    // A call's item opens when its name is out and takes its arguments (a freeform
    // tool's input text) as they are generated; it is done when the call is complete.
    // A call cut off by max_tokens never gets its .done events and is left out of
    // the response's output.
    for (const auto& p : d.call_parts) {
      if (p.begins) {
        s += close_item();
        call_ = CallItem{};
        call_.freeform = freeform_.count(p.name) > 0;
        json item = call_.freeform ? json{{"id", new_response_id("ctc_")}, {"type", "custom_tool_call"},
                                          {"status", "in_progress"}, {"call_id", p.id}, {"input", ""}}
                                   : json{{"id", new_response_id("fc_")}, {"type", "function_call"},
                                          {"status", "in_progress"}, {"arguments", ""}, {"call_id", p.id}};
        // A function of a namespace group is declared as "NAMESPACE.NAME".
        const size_t dot = p.name.find('.');
        if (dot != std::string::npos && namespaces_.count(p.name.substr(0, dot))) {
          item["namespace"] = p.name.substr(0, dot);
          item["name"] = p.name.substr(dot + 1);
        } else {
          item["name"] = p.name;
        }
        if (stream_) s += event("response.output_item.added", {{"output_index", output_.size()}, {"item", item}});
        output_.push_back(std::move(item));
      }
      const size_t idx = output_.size() - 1;
      json& item = output_.back();
      const std::string id = item["id"];
      if (call_.freeform) {
        std::string piece = call_.input.feed(p.arguments);
        if (p.ends) piece += call_.input.finish();
        item["input"] = item["input"].get<std::string>() + piece;
        if (stream_ && !piece.empty())
          s += event("response.custom_tool_call_input.delta", {{"item_id", id}, {"output_index", idx}, {"delta", piece}});
      } else {
        item["arguments"] = item["arguments"].get<std::string>() + p.arguments;
        if (stream_ && !p.arguments.empty())
          s += event("response.function_call_arguments.delta",
                     {{"item_id", id}, {"output_index", idx}, {"delta", p.arguments}});
      }
      if (p.ends) {
        if (stream_ && call_.freeform)
          s += event("response.custom_tool_call_input.done", {{"item_id", id}, {"output_index", idx}, {"input", item["input"]}});
        else if (stream_)
          s += event("response.function_call_arguments.done",
                     {{"item_id", id}, {"output_index", idx}, {"arguments", item["arguments"]}, {"name", item["name"]}});
        item["status"] = "completed";
        if (stream_) s += event("response.output_item.done", {{"output_index", idx}, {"item", item}});
      }
      if (p.cut) output_.erase(output_.end() - 1);
    }
    for (const auto& c : d.tool_calls) calls_.push_back(c);
    return s;
  }

  std::string end(const chat::Outcome& o) override {
    // A reply with neither text nor calls is still an (empty) message: clients read the
    // last message as the answer (the Agents SDK loops again without one).
    std::string s = calls_.empty() && !said_anything_ ? open_item(Open::Message) : "";
    s += close_item();
    const bool cut = o.finish_reason == "length";
    json r = response(cut ? "incomplete" : "completed",
                      cut ? json{{"reason", "max_output_tokens"}} : json(nullptr));
    r["usage"] = {{"input_tokens", o.prompt_tokens},
                  {"input_tokens_details", {{"cached_tokens", o.cached_tokens}}},
                  {"output_tokens", o.completion_tokens},
                  // Not counted apart from the rest of the reply's tokens.
                  {"output_tokens_details", {{"reasoning_tokens", o.reasoning_tokens}}},
                  {"total_tokens", o.prompt_tokens + o.completion_tokens}};
    if (store_ && on_done_) {
      json reply = {{"role", "assistant"}, {"content", content_.empty() && !calls_.empty() ? json() : json(content_)}};
      if (!reasoning_.empty()) reply["reasoning_content"] = reasoning_;
      if (!calls_.empty()) reply["tool_calls"] = tool_calls_json(calls_, 0, false);
      json conv = conversation_;
      conv.push_back(std::move(reply));
      on_done_(info_.id, ResponseStore::Entry{r, std::move(conv)});
    }
    if (!stream_) return to_text(r);
    return s + event(cut ? "response.incomplete" : "response.completed", {{"response", r}});
  }

  std::string error(const std::string& message, const std::string& type, const std::string& code) override {
    if (!stream_) return to_text(error_json(message, type, code));
    return event("error", {{"code", code.empty() ? json(type) : json(code)}, {"message", message}, {"param", nullptr}});
  }

 private:
  enum class Open { None, Reasoning, Message };

  static json error_json(const std::string& message, const std::string& type, const std::string& code) {
    json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code.empty() ? json() : json(code)}};
    return {{"error", e}};
  }

  std::string event(const char* type, json body) {
    body["type"] = type;
    body["sequence_number"] = seq_++;
    return std::string("event: ") + type + "\ndata: " + to_text(body) + "\n\n";
  }

  json response(const char* status, json incomplete) const {
    json r = {{"id", info_.id},
              {"object", "response"},
              {"created_at", info_.created_at},
              {"status", status},
              {"error", nullptr},
              {"incomplete_details", std::move(incomplete)},
              {"model", info_.model},
              {"output", output_}};
    for (const auto& [k, v] : echo_.items()) r[k] = v;
    // Hosted tools this server cannot run were not offered to the model.
    if (!dropped_tools_.empty()) r["metadata"]["sluice_dropped_tools"] = dropped_tools_;
    return r;
  }

  // Appends text to the open reasoning or message item, opening it first.
  std::string text_delta(Open kind, const std::string& text) {
    std::string s = open_ != kind ? open_item(kind) : "";
    open_text_ += text;
    said_anything_ = said_anything_ || kind == Open::Message;
    (open_ == Open::Message ? content_ : reasoning_) += text;
    if (stream_) {
      json e = {{"item_id", output_.back()["id"]}, {"output_index", output_.size() - 1}, {"content_index", 0},
                {"delta", text}};
      if (open_ == Open::Message) e["logprobs"] = json::array();
      s += event(open_ == Open::Message ? "response.output_text.delta" : "response.reasoning_text.delta", std::move(e));
    }
    return s;
  }

  std::string open_item(Open kind) {
    std::string s = close_item();
    {
      open_ = kind;
      const bool msg = kind == Open::Message;
      json item = msg ? json{{"id", new_response_id("msg_")}, {"type", "message"}, {"role", "assistant"},
                             {"status", "in_progress"}, {"content", json::array()}}
                      : json{{"id", new_response_id("rs_")}, {"type", "reasoning"}, {"summary", json::array()},
                             {"content", json::array()}, {"status", "in_progress"}};
      output_.push_back(item);
      open_text_.clear();
      if (stream_) {
        s += event("response.output_item.added", {{"output_index", output_.size() - 1}, {"item", item}});
        s += event("response.content_part.added", {{"item_id", item["id"]}, {"output_index", output_.size() - 1},
                                                   {"content_index", 0}, {"part", part("")}});
      }
    }
    return s;
  }

  json part(const std::string& text) const {
    if (open_ == Open::Message)
      return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
    return {{"type", "reasoning_text"}, {"text", text}};
  }

  std::string close_item() {
    if (open_ == Open::None) return "";
    std::string s;
    json& item = output_.back();
    const size_t idx = output_.size() - 1;
    const json p = part(open_text_);
    if (stream_) {
      json done = {{"item_id", item["id"]}, {"output_index", idx}, {"content_index", 0}, {"text", open_text_}};
      if (open_ == Open::Message) done["logprobs"] = json::array();
      s += event(open_ == Open::Message ? "response.output_text.done" : "response.reasoning_text.done", std::move(done));
      s += event("response.content_part.done", {{"item_id", item["id"]}, {"output_index", idx}, {"content_index", 0}, {"part", p}});
    }
    item["content"] = json::array({p});
    item["status"] = "completed";
    if (stream_) s += event("response.output_item.done", {{"output_index", idx}, {"item", item}});
    open_ = Open::None;
    return s;
  }

  const bool stream_, store_;
  const json echo_, conversation_;
  const ResponsesReplyInfo info_;
  StoreFn on_done_;
  json output_ = json::array();
  Open open_ = Open::None;
  std::string open_text_, content_, reasoning_;
  bool said_anything_ = false;  // a message item was written
  std::vector<chat::ToolCall> calls_;
  int64_t seq_ = 0;
  struct CallItem {
    bool freeform = false;
    FreeformInput input;  // a freeform call's input text, decoded as it streams
  } call_;
  const std::set<std::string> freeform_, namespaces_;
  const std::string dropped_tools_;
};

}  // namespace

std::unique_ptr<ReplyWriter> make_responses_writer(const ResponsesRequest& rr, ResponsesReplyInfo info,
                                                   StoreFn on_done) {
  return std::make_unique<ResponsesWriter>(rr, std::move(info), std::move(on_done));
}

}  // namespace sluice::server
