#include "server/anthropic_api.h"

#include <optional>
#include <set>

#include "chat/output_grammar.h"

#include "server/json_fields.h"
#include "server/response.h"
#include "util/json_depth.h"

namespace sluice::server {

using chat::ApiError;
using chat::LogprobEntry;
using chat::Outcome;
using chat::ReplyDelta;
using chat::GenerationRequest;
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

void refuse_images(const std::string& type, const std::string& where) {
  bad_field(where + ".type", "'{}': {} blocks are not supported: this model takes text only", where, type);
}

// A document block: plain text sources are read as text; PDFs, URLs and files are refused.
std::string document_text(const json& b, const std::string& w) {
  only_known(b, {"type", "source", "cache_control", "citations", "context", "title"}, w + ".");
  const json src = object_at(b.value("source", json()), w + ".source");
  const std::string type = string_at(src.value("type", json()), w + ".source.type");
  std::string text;
  if (present(b, "title")) text += string_at(b["title"], w + ".title") + "\n";
  if (type == "text") {
    only_known(src, {"type", "data", "media_type"}, w + ".source.");
    text += string_at(src.value("data", json()), w + ".source.data");
  } else if (type == "content") {
    only_known(src, {"type", "content"}, w + ".source.");
    const json& c = src["content"];
    if (c.is_string()) {
      text += c.get<std::string>();
    } else {
      if (!c.is_array()) bad_field(w + ".source.content", "'{}.source.content' must be a string or text blocks", w);
      for (size_t i = 0; i < c.size(); ++i) {
        const std::string pw = fmt::format("{}.source.content[{}]", w, i);
        if (!c[i].is_object() || c[i].value("type", json()) != "text") refuse_images("non-text", pw);
        only_known(c[i], {"type", "text", "cache_control", "citations"}, pw + ".");
        text += string_at(c[i].value("text", json()), pw + ".text");
      }
    }
  } else {
    bad_field(w + ".source.type", "'{}.source.type' '{}' is not supported: only text documents are read", w, type);
  }
  if (present(b, "context")) text += "\n" + string_at(b["context"], w + ".context");
  return text;
}

// A search_result block as text: its title, source and text blocks.
std::string search_result_text(const json& b, const std::string& w) {
  only_known(b, {"type", "content", "source", "title", "cache_control", "citations"}, w + ".");
  std::string text = string_at(b.value("title", json()), w + ".title") + "\n" + string_at(b.value("source", json()), w + ".source");
  const json& c = b.value("content", json());
  if (!c.is_array()) bad_field(w + ".content", "'{}.content' must be an array of text blocks", w);
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string pw = fmt::format("{}.content[{}]", w, i);
    if (!c[i].is_object() || c[i].value("type", json()) != "text") bad_field(pw + ".type", "'{}' must be a text block", pw);
    only_known(c[i], {"type", "text", "cache_control", "citations"}, pw + ".");
    text += "\n" + string_at(c[i].value("text", json()), pw + ".text");
  }
  return text;
}

// A string, or blocks read as text (text, document, search_result; tool_reference
// blocks of tool search name a tool, which is declared already).
std::string text_content(const json& c, const std::string& where) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad_field(where, "'{}' must be a string or an array of content blocks", where);
  std::string s;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string w = fmt::format("{}[{}]", where, i);
    if (!c[i].is_object() || !c[i].contains("type")) bad_field(w + ".type", "'{}' needs a type", w);
    const std::string type = string_at(c[i]["type"], w + ".type");
    if (type == "text") {
      only_known(c[i], {"type", "text", "cache_control", "citations"}, w + ".");
      s += string_at(c[i].value("text", json()), w + ".text");
    } else if (type == "document") {
      s += document_text(c[i], w);
    } else if (type == "search_result") {
      s += search_result_text(c[i], w);
    } else if (type == "tool_reference") {
      only_known(c[i], {"type", "tool_name", "cache_control"}, w + ".");
    } else if (type == "image" || type == "browser_state") {
      refuse_images(type, w);
    } else {
      bad_field(w + ".type", "content block type '{}' is not supported here", type);
    }
  }
  return s;
}

// Reasoning that this server sent with display "omitted" travels in the signature.
const std::string kSignaturePrefix = "sluice.";

std::string base64(const std::string& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8 | uint8_t(in[i + 2]);
    out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], t[v & 63]};
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    out += {t[v >> 18], t[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    const uint32_t v = uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8;
    out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], '='};
  }
  return out;
}

std::optional<std::string> unbase64(std::string_view in) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
            : c == '+' ? 62 : c == '/' ? 63 : c == '=' ? -2 : -1;
    if (v == -1) return std::nullopt;
    if (v == -2) break;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xFF);
    }
  }
  return out;
}

// The built-in schemas of Anthropic's client tools (the client runs them; their
// schema is the API's, not the request's).
json builtin_client_tool(const std::string& type, const std::string& w, RequestNotes* notes) {
  auto str_prop = [](const char* d) { return json{{"type", "string"}, {"description", d}}; };
  if (type.rfind("bash_", 0) == 0) {
    return {{"name", "bash"},
            {"description", "Runs a shell command in a persistent bash session and returns its output."},
            {"parameters",
             {{"type", "object"},
              {"properties",
               {{"command", str_prop("The command to run.")},
                {"restart", {{"type", "boolean"}, {"description", "Restart the bash session instead."}}}}}}}};
  }
  if (type.rfind("text_editor_", 0) == 0) {
    const bool old = type == "text_editor_20241022" || type == "text_editor_20250124";
    json commands = {"view", "create", "str_replace", "insert"};
    if (old) commands.push_back("undo_edit");
    return {{"name", old ? "str_replace_editor" : "str_replace_based_edit_tool"},
            {"description", "Views, creates and edits text files: view a file or directory, create a file, replace "
                            "one exact occurrence of a string, or insert text after a line."},
            {"parameters",
             {{"type", "object"},
              {"properties",
               {{"command", {{"type", "string"}, {"enum", commands}}},
                {"path", str_prop("Absolute path of the file or directory.")},
                {"file_text", str_prop("create: the new file's content.")},
                {"old_str", str_prop("str_replace: the exact text to replace (it must occur once).")},
                {"new_str", str_prop("str_replace: the replacement; insert: the text to insert.")},
                {"insert_line", {{"type", "integer"}, {"description", "insert: the line after which to insert (0: at the start)."}}},
                {"insert_text", str_prop("insert: the text to insert.")},
                {"view_range", {{"type", "array"}, {"items", {{"type", "integer"}}}, {"description", "view: first and last line (-1: to the end)."}}}}},
              {"required", {"command", "path"}}}}};
  }
  if (type == "memory_20250818") {
    return {{"name", "memory"},
            {"description", "Reads and writes files in the /memories directory, kept between conversations."},
            {"parameters",
             {{"type", "object"},
              {"properties",
               {{"command", {{"type", "string"}, {"enum", {"view", "create", "str_replace", "insert", "delete", "rename"}}}},
                {"path", str_prop("Path under /memories.")},
                {"file_text", str_prop("create: the content.")},
                {"old_str", str_prop("str_replace: the text to replace.")},
                {"new_str", str_prop("str_replace: the replacement.")},
                {"insert_line", {{"type", "integer"}}},
                {"insert_text", str_prop("insert: the text.")},
                {"old_path", str_prop("rename: from.")},
                {"new_path", str_prop("rename: to.")},
                {"view_range", {{"type", "array"}, {"items", {{"type", "integer"}}}}}}},
              {"required", {"command"}}}}};
  }
  (void)w;
  (void)notes;
  return nullptr;
}

bool valid_tool_name(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

// One entry of `tools` -> the function declared to the model, or null when the tool
// is a server tool this server cannot run (recorded in notes).
json parse_tool(const json& t, const std::string& w, RequestNotes* notes, std::set<std::string>* strict) {
  object_at(t, w);
  const std::string type = present(t, "type") ? string_at(t["type"], w + ".type") : "custom";
  // Fields every tool may carry: caching and tool search are provider features;
  // eager_input_streaming asks for what every call gets here (input streamed as generated).
  auto common = [&](std::set<std::string> known) {
    known.insert({"type", "name", "cache_control", "defer_loading", "allowed_callers", "input_examples", "strict",
                  "eager_input_streaming"});
    only_known(t, known, w + ".");
    if (notes && present(t, "cache_control")) notes->ignore("cache_control");
    if (notes && present(t, "defer_loading")) notes->ignore("tools.defer_loading");
    if (notes && present(t, "allowed_callers")) notes->ignore("tools.allowed_callers");
    if (present(t, "strict")) boolean_at(t["strict"], w + ".strict");
  };
  json f;
  if (type == "custom") {
    common({"description", "input_schema"});
    const std::string name = string_at(t.value("name", json()), w + ".name");
    if (!valid_tool_name(name)) bad_field(w + ".name", "'{}.name' must be 1-128 characters of a-z, A-Z, 0-9, _ and -", w);
    if (!present(t, "input_schema") || !t["input_schema"].is_object())
      bad_field(w + ".input_schema", "'{}.input_schema' must be a JSON Schema object", w);
    f = {{"name", name}, {"parameters", t["input_schema"]}};
    if (present(t, "description")) f["description"] = string_at(t["description"], w + ".description");
  } else if (type.rfind("bash_", 0) == 0 || type.rfind("text_editor_", 0) == 0 || type == "memory_20250818") {
    common({"max_characters"});
    f = builtin_client_tool(type, w, notes);
    if (present(t, "name") && t["name"] != f["name"])
      bad_field(w + ".name", "'{}.name' must be '{}' for a {} tool", w, f["name"].get<std::string>(), type);
    if (notes && present(t, "max_characters")) notes->ignore("tools.max_characters");
  } else {
    // Server tools (web search and fetch, code execution, tool search, MCP toolsets,
    // the advisor) run on the provider's side; computer and browser use need images.
    if (notes) notes->dropped_tools.push_back(present(t, "name") && t["name"].is_string() ? t["name"].get<std::string>() : type);
    return nullptr;
  }
  if (strict && t.value("strict", json()) == true) strict->insert(f["name"].get<std::string>());
  if (present(t, "input_examples")) {
    const json& ex = array_at(t["input_examples"], w + ".input_examples");
    std::string d = f.value("description", "");
    d += d.empty() ? "Input examples:" : "\n\nInput examples:";
    for (const auto& e : ex) d += "\n" + e.dump(-1, ' ', false, json::error_handler_t::replace);
    f["description"] = d;
  }
  return {{"type", "function"}, {"function", f}};
}

// A system message in the conversation: text, and tools added or removed from there on.
void system_message(const json& m, const std::string& w, json& out, json& tools, bool later_user, RequestNotes* notes) {
  only_known(m, {"role", "content", "clear_at", "output_config"}, w + ".");
  if (present(m, "output_config") && notes) notes->ignore("messages.output_config");
  if (present(m, "clear_at")) {
    const std::string c = string_at(m["clear_at"], w + ".clear_at");
    if (c != "next_user_message" && c != "never") bad_field(w + ".clear_at", "'{}.clear_at' must be next_user_message or never", w);
    if (c == "next_user_message" && later_user) return;  // cleared by a user message after it
  }
  if (!present(m, "content")) return;
  const json& c = m["content"];
  if (c.is_string()) {
    out.push_back({{"role", "system"}, {"content", c}});
    return;
  }
  if (!c.is_array()) bad_field(w + ".content", "'{}.content' must be a string or an array of blocks", w);
  std::string text;
  for (size_t j = 0; j < c.size(); ++j) {
    const std::string bw = fmt::format("{}.content[{}]", w, j);
    const json& b = object_at(c[j], bw);
    const std::string type = string_at(b.value("type", json()), bw + ".type");
    if (type == "text") {
      only_known(b, {"type", "text", "cache_control", "citations"}, bw + ".");
      text += string_at(b.value("text", json()), bw + ".text");
      continue;
    }
    if (type != "tool_addition" && type != "tool_removal")
      bad_field(bw + ".type", "content block type '{}' is not supported in a system message", type);
    only_known(b, {"type", "tool", "cache_control"}, bw + ".");
    const json tool = object_at(b.value("tool", json()), bw + ".tool");
    const std::string kind = string_at(tool.value("type", json()), bw + ".tool.type");
    if (type == "tool_addition" && kind == "tool_definition") {
      json f = parse_tool(tool.value("definition", json()), bw + ".tool.definition", notes, nullptr);
      if (!f.is_null()) tools.push_back(std::move(f));
    } else if (type == "tool_removal" && kind == "tool_reference") {
      const std::string name = string_at(tool.value("name", json()), bw + ".tool.name");
      for (size_t k = 0; k < tools.size(); ++k)
        if (tools[k]["function"]["name"] == name) tools.erase(k--);
    }
    // A tool_reference addition names a deferred tool, which is declared already;
    // MCP references concern the provider's MCP connector.
  }
  if (!text.empty()) out.push_back({{"role", "system"}, {"content", text}});
}

// A thinking block's reasoning; sent with display "omitted", it comes back in its signature.
std::string thinking_text(const json& b, const std::string& bw) {
  only_known(b, {"type", "thinking", "signature"}, bw + ".");
  std::string t = string_at(b.value("thinking", json()), bw + ".thinking");
  if (t.empty() && b.value("signature", json()).is_string()) {
    const std::string sig = b["signature"].get<std::string>();
    if (sig.rfind(kSignaturePrefix, 0) == 0)
      if (auto decoded = unbase64(std::string_view(sig).substr(kSignaturePrefix.size()))) t = *decoded;
  }
  return t;
}

// A user message's tool_result block: a tool message, after the user's text so far (`text`, then cleared).
void append_tool_result(const json& b, const std::string& bw, std::string& text, json& out) {
  only_known(b, {"type", "tool_use_id", "content", "is_error", "cache_control", "toolset_name"}, bw + ".");
  if (!text.empty()) {
    out.push_back({{"role", "user"}, {"content", text}});
    text.clear();
  }
  std::string result = b.contains("content") && !b["content"].is_null() ? text_content(b["content"], bw + ".content") : "";
  if (present(b, "is_error") && b["is_error"] == true) result = "Error: " + result;
  out.push_back({{"role", "tool"}, {"tool_call_id", string_at(b.value("tool_use_id", json()), bw + ".tool_use_id")},
                 {"content", result}});
}

json parse_messages(const json& body, const json& system, json& tools, RequestNotes* notes) {
  json out = json::array();
  if (!system.is_null()) out.push_back({{"role", "system"}, {"content", text_content(system, "system")}});
  if (!present(body, "messages") || !body["messages"].is_array() || body["messages"].empty())
    bad_field("messages", "'messages' must be a non-empty array");
  const json& ms = body["messages"];
  for (size_t i = 0; i < ms.size(); ++i) {
    const std::string w = fmt::format("messages[{}]", i);
    const json& m = ms[i];
    object_at(m, w);
    const std::string role = string_at(m.value("role", json()), w + ".role");
    if (role == "system") {
      bool later_user = false;
      for (size_t k = i + 1; k < ms.size() && !later_user; ++k) later_user = ms[k].is_object() && ms[k].value("role", json()) == "user";
      system_message(m, w, out, tools, later_user, notes);
      continue;
    }
    only_known(m, {"role", "content"}, w + ".");
    if (role != "user" && role != "assistant")
      bad_field(w + ".role", "Unexpected role \"{}\". Allowed roles are \"user\", \"assistant\" and \"system\".", role);
    require(m, "content", w + ".");
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
      const std::string type = string_at(b["type"], bw + ".type");
      if (type == "text") {
        only_known(b, {"type", "text", "cache_control", "citations"}, bw + ".");
        text += string_at(b.value("text", json()), bw + ".text");
      } else if (type == "document" && role == "user") {
        text += document_text(b, bw);
      } else if (type == "search_result" && role == "user") {
        text += search_result_text(b, bw);
      } else if (type == "image" || type == "container_upload") {
        refuse_images(type, bw);
      } else if (type == "thinking" && role == "assistant") {
        thinking += thinking_text(b, bw);
      } else if (type == "redacted_thinking" && role == "assistant") {
        only_known(b, {"type", "data"}, bw + ".");  // opaque to this server: nothing to replay
      } else if ((type == "tool_use" || type == "mcp_tool_use") && role == "assistant") {
        only_known(b, {"type", "id", "name", "input", "cache_control", "caller", "toolset_name", "server_name"}, bw + ".");
        if (!present(b, "input") || !b["input"].is_object()) bad_field(bw + ".input", "'{}.input' must be an object", bw);
        calls.push_back({{"id", string_at(b.value("id", json()), bw + ".id")},
                         {"type", "function"},
                         {"function", {{"name", string_at(b.value("name", json()), bw + ".name")}, {"arguments", b["input"].dump()}}}});
      } else if ((type == "tool_result" || type == "mcp_tool_result") && role == "user") {
        append_tool_result(b, bw, text, out);
      } else if (role == "assistant" &&
                 (type == "server_tool_use" || type == "fallback" ||
                  (type.size() > 12 && type.substr(type.size() - 12) == "_tool_result"))) {
        // The record of a server tool's call and result (web search, code execution...), or of a
        // model fallback: the provider's, not replayable here; the reply text after it stays.
        if (notes) notes->ignore("messages.content." + std::string(type == "fallback" ? "fallback" : "server_tool_use"));
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

// output_config.effort / thinking -> the reasoning effort (none, low, medium, high, max; "" the model's default).
std::string effort_of(const json& e, const std::string& where) {
  const std::string v = string_at(e, where);
  if (v == "low" || v == "medium" || v == "high" || v == "max") return v;
  if (v == "xhigh") return "max";
  bad_field(where, "'{}' must be low, medium, high, xhigh or max, got '{}'", where, v);
}

// context_management.edits: clearing thinking is done here; clearing tool results
// and compaction act only from a prompt size on (recorded: a longer prompt is refused).
void context_edits(const json& cm, json& messages, RequestNotes* notes) {
  object_at(cm, "context_management");
  only_known(cm, {"edits"}, "context_management.");
  if (!present(cm, "edits")) return;
  const json& edits = cm["edits"];
  array_at(edits, "context_management.edits");
  for (size_t i = 0; i < edits.size(); ++i) {
    const std::string w = fmt::format("context_management.edits[{}]", i);
    const json& e = object_at(edits[i], w);
    const std::string type = string_at(e.value("type", json()), w + ".type");
    if (type == "clear_thinking_20251015") {
      only_known(e, {"type", "keep"}, w + ".");
      int64_t keep = -1;  // all
      if (present(e, "keep") && e["keep"] != "all") {
        const json& k = object_at(e["keep"], w + ".keep");
        const std::string kt = string_at(k.value("type", json()), w + ".keep.type");
        if (kt == "thinking_turns") {
          if (!k.value("value", json()).is_number_integer() || k["value"].get<int64_t>() < 0)
            bad_field(w + ".keep.value", "'{}.keep.value' must be a non-negative integer", w);
          keep = k["value"].get<int64_t>();
        } else if (kt != "all") {
          bad_field(w + ".keep.type", "'{}.keep.type' must be thinking_turns or all", w);
        }
      }
      if (keep < 0) continue;
      // The reasoning of all but the last `keep` assistant turns is left out.
      int64_t seen = 0;
      for (size_t m = messages.size(); m-- > 0;)
        if (messages[m]["role"] == "assistant" && messages[m].contains("reasoning_content") && seen++ >= keep)
          messages[m].erase("reasoning_content");
    } else if (type == "clear_tool_uses_20250919" || type == "compact_20260112") {
      const bool clear = type == "clear_tool_uses_20250919";
      only_known(e, clear ? std::set<std::string>{"type", "clear_at_least", "clear_tool_inputs", "exclude_tools", "keep", "trigger"}
                          : std::set<std::string>{"type", "instructions", "pause_after_compaction", "trigger"},
                 w + ".");
      int64_t trigger = clear ? 100000 : 150000;  // the API's defaults, in input tokens
      if (present(e, "trigger")) {
        const json& t = object_at(e["trigger"], w + ".trigger");
        if (t.value("type", json()) == "input_tokens" && t.value("value", json()).is_number_integer()) trigger = t["value"].get<int64_t>();
        else if (t.value("type", json()) == "tool_uses" && t.value("value", json()).is_number_integer()) {
          int64_t uses = 0;
          for (const auto& m : messages) uses += m.contains("tool_calls") ? int64_t(m["tool_calls"].size()) : 0;
          if (uses >= t["value"].get<int64_t>())
            bad_field(w + ".trigger", "'{}': clearing tool uses is not supported by this server, and this conversation has {} (the trigger is {})",
                      w, uses, t["value"].get<int64_t>());
          continue;
        } else {
          bad_field(w + ".trigger", "'{}.trigger' must be {{type: input_tokens or tool_uses, value}}", w);
        }
      }
      if (notes && (notes->edit_trigger == 0 || trigger < notes->edit_trigger)) {
        notes->edit_trigger = trigger;
        notes->edit_name = w + " (" + type + ")";
      }
    } else {
      bad_field(w + ".type", "'{}.type' '{}' is not supported", w, type);
    }
  }
}

}  // namespace

GenerationRequest parse_anthropic_request(const json& body, const RequestLimits& limits, bool count_tokens, RequestNotes* notes) {
  RequestNotes scratch;
  if (!notes) notes = &scratch;
  // Fields about provider features this server does not have: accepted, without effect.
  static const std::set<std::string> ignored = {"service_tier", "speed", "inference_geo", "diagnostics", "billing_policy",
                                                "fallbacks", "fallback_credit_token", "workspace_id", "user_profile_id",
                                                "betas", "cache_control", "container", "compaction"};
  std::set<std::string> known = {"model", "messages", "system", "tools", "tool_choice", "thinking", "output_config",
                                 "output_format", "context_management", "mcp_servers", "thread"};
  known.insert(ignored.begin(), ignored.end());
  if (!count_tokens) known.insert({"max_tokens", "stop_sequences", "temperature", "top_p", "top_k", "metadata", "stream"});
  only_known(body, known, "");
  for (const auto& k : ignored)
    if (present(body, k.c_str())) notes->ignore(k);
  if (present(body, "thread")) bad_field("thread", "'thread' is not supported: this server keeps no threads");
  GenerationRequest r;
  r.kind = GenerationRequest::Kind::Chat;
  r.sampling = limits.defaults;
  r.sampling.seed = limits.default_seed;
  require_present(body, "model", "");
  r.model = string_at(body["model"], "model");
  json tools = json::array();
  if (present(body, "tools")) {
    const json& ts = body["tools"];
    array_at(ts, "tools");
    for (size_t i = 0; i < ts.size(); ++i) {
      json f = parse_tool(ts[i], fmt::format("tools[{}]", i), notes, &r.strict_tools);
      if (!f.is_null()) tools.push_back(std::move(f));
    }
  }
  if (present(body, "mcp_servers")) {
    const json& ms = body["mcp_servers"];
    array_at(ms, "mcp_servers");
    for (const auto& s : ms) notes->dropped_tools.push_back("mcp:" + (s.is_object() && s.value("name", json()).is_string() ? s["name"].get<std::string>() : "?"));
  }
  r.messages = parse_messages(body, present(body, "system") ? body["system"] : json(), tools, notes);
  if (present(body, "context_management")) context_edits(body["context_management"], r.messages, notes);
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
        r.stop.push_back(string_at(s[i], fmt::format("stop_sequences[{}]", i)));
        if (r.stop.back().empty()) bad_field(fmt::format("stop_sequences[{}]", i), "stop sequences must not be empty");
      }
    }
    if (present(body, "metadata")) {
      only_known(object_at(body["metadata"], "metadata"), {"user_id"}, "metadata.");
    }
    if (present(body, "stream")) r.stream = boolean_at(body["stream"], "stream");
    if (present(body, "service_tier")) string_at(body["service_tier"], "service_tier");
  }
  std::string effort;
  json format;
  if (present(body, "output_config")) {
    const json& oc = object_at(body["output_config"], "output_config");
    only_known(oc, {"effort", "format", "task_budget"}, "output_config.");
    if (present(oc, "effort")) effort = effort_of(oc["effort"], "output_config.effort");
    if (present(oc, "format")) format = oc["format"];
    if (present(oc, "task_budget")) notes->ignore("output_config.task_budget");
  }
  if (present(body, "output_format")) format = body["output_format"];
  if (!format.is_null()) {
    object_at(format, "output_config.format");
    only_known(format, {"type", "schema"}, "output_config.format.");
    if (format.value("type", json()) != "json_schema")
      bad_field("output_config.format.type", "'output_config.format.type' must be json_schema");
    require_present(format, "schema", "output_config.format.");
    r.grammar = chat::json_schema_grammar(format["schema"], "output_config.format.schema");
  }
  r.reasoning_effort = effort;
  if (present(body, "thinking")) {
    const json& t = object_at(body["thinking"], "thinking");
    only_known(t, {"type", "budget_tokens", "display", "block_binding"}, "thinking.");
    const std::string type = string_at(t.value("type", json()), "thinking.type");
    if (type != "enabled" && type != "disabled" && type != "adaptive" && type != "between_tools")
      bad_field("thinking.type", "'thinking.type' must be enabled, disabled, adaptive or between_tools");
    if (present(t, "budget_tokens")) {
      if (!t["budget_tokens"].is_number_integer() || t["budget_tokens"].get<int64_t>() < 1)
        bad_field("thinking.budget_tokens", "'thinking.budget_tokens' must be a positive integer");
      notes->ignore("thinking.budget_tokens");  // reasoning is not cut at a budget here
    }
    if (present(t, "block_binding")) notes->ignore("thinking.block_binding");
    if (present(t, "display")) {
      const std::string d = string_at(t["display"], "thinking.display");
      if (d != "summarized" && d != "omitted" && d != "updates")
        bad_field("thinking.display", "'thinking.display' must be summarized, omitted or updates");
      r.reasoning_hidden = d == "omitted";
    }
    if (type == "disabled") r.reasoning_effort = "none";
    else if (type == "enabled" && effort.empty()) r.reasoning_effort = "max";
  }
  std::string choice = "auto";
  bool parallel = true;
  if (present(body, "tool_choice")) {
    const json& tc = body["tool_choice"];
    object_at(tc, "tool_choice");
    only_known(tc, {"type", "name", "disable_parallel_tool_use"}, "tool_choice.");
    choice = string_at(tc.value("type", json()), "tool_choice.type");
    if (choice != "auto" && choice != "any" && choice != "tool" && choice != "none")
      bad_field("tool_choice.type", "'tool_choice.type' must be auto, any, tool or none");
    if (choice == "tool") r.tool_choice_name = string_at(tc.value("name", json()), "tool_choice.name");
    if (present(tc, "disable_parallel_tool_use"))
      parallel = !boolean_at(tc["disable_parallel_tool_use"], "tool_choice.disable_parallel_tool_use");
  }
  r.parallel_tool_calls = parallel;
  if (!tools.empty() && choice != "none") r.tools = std::move(tools);
  if (r.grammar && r.tools.is_array())
    bad_field("output_config.format", "a JSON output format and tools cannot both be used (set tool_choice none)");
  if (choice == "any" || choice == "tool") {
    if (!r.tools.is_array()) bad_field("tool_choice", "tool_choice '{}' needs 'tools'", choice);
    r.tool_choice = choice == "any" ? GenerationRequest::ToolChoice::Required : GenerationRequest::ToolChoice::Named;
    if (choice == "tool" &&
        std::none_of(r.tools.begin(), r.tools.end(), [&](const json& t) { return t["function"]["name"] == r.tool_choice_name; }))
      bad_field("tool_choice.name", "'tool_choice.name' '{}' is not one of 'tools'", r.tool_choice_name);
  }
  return r;
}

namespace {
// The signature of a thinking block: empty, or with display "omitted" the reasoning
// itself (base64), so that the block sent back replays it.
std::string signature_of(const std::string& reasoning) { return kSignaturePrefix + base64(reasoning); }
}  // namespace

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
  AnthropicWriter(const GenerationRequest& req, std::string id, std::string model, int64_t prompt_tokens)
      : req_(req), id_(std::move(id)), model_(std::move(model)), prompt_tokens_(prompt_tokens) {}
  bool streaming() const override { return req_.stream; }
  std::string keep_alive() override { return streaming() ? event("ping", {{"type", "ping"}}) : " "; }
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
    // A tool_use block opens when the call's name is out and takes its input as it
    // is generated (input_json_delta); it closes when the call is complete. A call
    // cut off by max_tokens is never closed, and is not in the message's content.
    for (const auto& p : d.call_parts) {
      if (p.begins) {
        out += close_block();
        const std::string id = "toolu_" + p.id.substr(p.id.find('_') + 1);
        blocks_.push_back({{"type", "tool_use"}, {"id", id}, {"name", p.name}, {"input", json::object()}});
        args_.clear();
        open_ = true;
        if (req_.stream)
          out += event("content_block_start", {{"type", "content_block_start"}, {"index", blocks_.size() - 1},
                                               {"content_block", blocks_.back()}});
      }
      args_ += p.arguments;
      if (req_.stream && !p.arguments.empty())
        out += event("content_block_delta", {{"type", "content_block_delta"}, {"index", blocks_.size() - 1},
                                             {"delta", {{"type", "input_json_delta"}, {"partial_json", p.arguments}}}});
      if (p.ends) {
        // Arguments nested past the shared bound stay text (the writer recurses).
        json input = json_text_depth(args_) > kMaxJsonDepth ? json() : json::parse(args_, nullptr, false);
        if (!input.is_object()) input = json{{"_raw", args_}};  // a complete call whose arguments are not an object
        blocks_.back()["input"] = std::move(input);
        out += close_block();
      }
      if (p.cut) {
        blocks_.pop_back();
        open_ = false;
      }
    }
    return req_.stream ? out : "";
  }
  std::string end(const Outcome& o) override {
    const bool by_stop = o.finish_reason == "stop" && !req_.stop.empty();
    if (!req_.stream) {
      json content = json::array();
      close_block();
      for (auto& b : blocks_) content.push_back(b);
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
    const bool thinking = std::string(type) == "thinking";
    // With display "omitted" the reasoning is not shown: it goes back in the block's signature.
    if (thinking && req_.reasoning_hidden) {
      hidden_ += text;
      return out;
    }
    blocks_.back()[type] = blocks_.back()[type].get<std::string>() + text;
    if (req_.stream)
      out += event("content_block_delta", {{"type", "content_block_delta"}, {"index", blocks_.size() - 1},
                                           {"delta", {{"type", thinking ? "thinking_delta" : "text_delta"}, {type, text}}}});
    return out;
  }
  std::string close_block() {
    if (!open_) return "";
    open_ = false;
    std::string out;
    if (blocks_.back()["type"] == "thinking") {
      const std::string sig = req_.reasoning_hidden ? signature_of(hidden_) : "";
      hidden_.clear();
      blocks_.back()["signature"] = sig;
      if (req_.stream)
        out += event("content_block_delta", {{"type", "content_block_delta"}, {"index", blocks_.size() - 1},
                                             {"delta", {{"type", "signature_delta"}, {"signature", sig}}}});
    }
    if (!req_.stream) return "";
    return out + event("content_block_stop", {{"type", "content_block_stop"}, {"index", blocks_.size() - 1}});
  }

  const GenerationRequest& req_;
  std::string id_, model_;
  int64_t prompt_tokens_;
  std::vector<json> blocks_;
  std::string args_;    // the open tool_use block's input text so far
  std::string hidden_;  // the open thinking block's text, when it is not shown
  bool open_ = false;
};

}  // namespace

std::unique_ptr<ReplyWriter> make_anthropic_writer(const GenerationRequest& req, std::string id, std::string model,
                                                   int64_t prompt_tokens) {
  return std::make_unique<AnthropicWriter>(req, std::move(id), std::move(model), prompt_tokens);
}

}  // namespace sluice::server
