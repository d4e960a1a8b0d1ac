#include "text/xtml.h"

#include <map>

#include "util/error.h"
#include "util/json_depth.h"

namespace sluice::text {

namespace {

using ojson = nlohmann::ordered_json;
const char* const kOpen = "<|open|>";
const char* const kClose = "<|close|>";
const char* const kSep = "<|sep|>";
const char* const kEnd = "<|end_of_msg|>";

// Sorted keys at every depth (the "deep-sorted" tool declaration).
nlohmann::json deep_sorted(const ojson& j) {
  // nlohmann::json (std::map) orders object keys, recursively
  return nlohmann::json::parse(j.dump());
}

std::string content_text(const ojson& m) {
  if (!m.contains("content") || m["content"].is_null()) return "";
  const auto& c = m["content"];
  if (c.is_string()) return c.get<std::string>();
  if (c.is_array()) {  // [{type: "text", text}] parts
    std::string s;
    for (const auto& p : c)
      if (p.is_object() && p.value("type", "") == "text" && p.contains("text") && p["text"].is_string())
        s += p["text"].get<std::string>();
      else
        fail("xtml: only text content parts are supported");
    return s;
  }
  fail("xtml: message content must be a string, a list of text parts or null");
}

const char* json_type(const ojson& v) {
  if (v.is_string()) return "string";
  if (v.is_number()) return "number";
  if (v.is_boolean()) return "boolean";
  if (v.is_null()) return "null";
  if (v.is_object()) return "object";
  return "array";
}

struct Out {
  std::vector<XtmlSegment> segs;
  void t(const std::string& s) {  // trusted structure
    if (!segs.empty() && segs.back().trusted)
      segs.back().text += s;
    else
      segs.push_back({s, true});
  }
  void u(const std::string& s) {  // untrusted text
    if (s.empty()) return;
    if (!segs.empty() && !segs.back().trusted)
      segs.back().text += s;
    else
      segs.push_back({s, false});
  }
  // Tag names and attribute values are ordinary text; only the markers are special.
  void open(const std::string& tag_and_attrs) {
    t(kOpen);
    u(tag_and_attrs);
    t(kSep);
  }
  void close(const std::string& tag) {
    t(kClose);
    u(tag);
    t(kSep);
  }
};

void system_message(Out& o, const std::string& type_attr, const std::string& body) {
  o.open("message role=\"system\"" + (type_attr.empty() ? "" : " type=\"" + xtml_escape(type_attr) + "\""));
  o.u(body);
  o.close("message");
  o.t(kEnd);
}

}  // namespace

std::string xtml_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '&')
      r += "&amp;";
    else if (c == '"')
      r += "&quot;";
    else
      r += c;
  }
  return r;
}

std::vector<XtmlSegment> xtml_render(const ojson& messages, const ojson& tools, const XtmlOptions& opt) {
  if (!messages.is_array()) fail("xtml: messages must be a list");
  // The JSON writer recurses: nothing deeper than the shared bound is written.
  check_json_depth(messages, "xtml: messages");
  check_json_depth(tools, "xtml: tools");
  Out o;
  if (!tools.is_null()) {
    if (!tools.is_array()) fail("xtml: tools must be a list");
    if (!tools.empty())
      system_message(o, "tool-declare",
                     "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n" +
                         deep_sorted(tools).dump() + "\n```");
  }
  if (opt.thinking)
    system_message(o, "thinking-effort",
                   "`thinking_effort` guides on how much to think in your thinking channel (not including the response "
                   "channel), supported values include `low`, `medium`, `high`, and `max`.\nNow the system is invoked "
                   "with `thinking_effort=" +
                       opt.thinking_effort + "`.");

  // call id -> (tool name, index) from the latest assistant message with tool calls
  std::map<std::string, std::pair<std::string, size_t>> calls;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) fail("xtml: messages[{}] needs a role", i);
    const std::string role = m["role"].get<std::string>();
    if (role == "system" || role == "user") {
      std::string attrs = "message role=\"" + role + "\"";
      if (m.contains("name") && m["name"].is_string()) attrs += " name=\"" + xtml_escape(m["name"].get<std::string>()) + "\"";
      o.open(attrs);
      o.u(content_text(m));
      o.close("message");
      o.t(kEnd);
    } else if (role == "assistant") {
      o.open("message role=\"assistant\"");
      o.open("think");
      if (m.contains("reasoning_content") && m["reasoning_content"].is_string())
        o.u(m["reasoning_content"].get<std::string>());
      o.close("think");
      o.open("response");
      o.u(content_text(m));
      o.close("response");
      calls.clear();
      if (m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty()) {
        o.open("tools");
        size_t k = 0;
        for (const auto& c : m["tool_calls"]) {
          const ojson& fn = c.contains("function") ? c["function"] : c;
          if (!fn.contains("name") || !fn["name"].is_string()) fail("xtml: messages[{}].tool_calls[{}] needs a name", i, k);
          const std::string name = fn["name"].get<std::string>();
          if (c.contains("id") && c["id"].is_string()) calls[c["id"].get<std::string>()] = {name, k};
          o.open("call tool=\"" + xtml_escape(name) + "\" index=\"" + std::to_string(k) + "\"");
          ojson args;
          bool parsed = false;
          std::string raw;
          if (fn.contains("arguments")) {
            if (fn["arguments"].is_string()) {
              raw = fn["arguments"].get<std::string>();
              check_json_text_depth(raw, fmt::format("xtml: messages[{}].tool_calls[{}].function.arguments", i, k));
              try {
                args = ojson::parse(raw);
                parsed = args.is_object();
              } catch (const ojson::exception&) {
              }
            } else if (fn["arguments"].is_object()) {
              args = fn["arguments"];
              parsed = true;
            } else {
              raw = fn["arguments"].dump();
            }
          } else {
            args = ojson::object();
            parsed = true;
          }
          if (parsed) {
            for (const auto& [key, v] : args.items()) {
              o.open("argument key=\"" + xtml_escape(key) + "\" type=\"" + json_type(v) + "\"");
              o.u(v.is_string() ? v.get<std::string>() : v.dump());
              o.close("argument");
            }
          } else {
            o.open("json type=\"object\"");
            o.u(raw);
            o.close("json");
          }
          o.close("call");
          ++k;
        }
        o.close("tools");
      }
      o.close("message");
      o.t(kEnd);
    } else if (role == "tool") {
      // a run of tool results, reordered to the call order
      size_t j = i;
      std::vector<std::pair<size_t, const ojson*>> run;
      while (j < messages.size() && messages[j].is_object() && messages[j].value("role", "") == "tool") {
        const auto& tm = messages[j];
        std::string id = tm.contains("tool_call_id") && tm["tool_call_id"].is_string() ? tm["tool_call_id"].get<std::string>() : "";
        auto it = calls.find(id);
        size_t order = it != calls.end() ? it->second.second : calls.size() + (j - i);
        run.push_back({order, &tm});
        ++j;
      }
      std::stable_sort(run.begin(), run.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (const auto& [order, tm] : run) {
        std::string id = tm->contains("tool_call_id") && (*tm)["tool_call_id"].is_string() ? (*tm)["tool_call_id"].get<std::string>() : "";
        auto it = calls.find(id);
        std::string name = it != calls.end() ? it->second.first : tm->value("name", "");
        o.open("message role=\"tool\" tool=\"" + xtml_escape(name) + "\" index=\"" + std::to_string(order) + "\"");
        o.u(content_text(*tm));
        o.close("message");
        o.t(kEnd);
      }
      i = j - 1;
    } else {
      fail("xtml: messages[{}] has unsupported role '{}'", i, role);
    }
  }
  if (opt.add_generation_prompt) {
    o.open("message role=\"assistant\"");
    o.open(opt.thinking ? "think" : "response");
  }
  return o.segs;
}

std::string xtml_text(const std::vector<XtmlSegment>& segs) {
  std::string s;
  for (const auto& g : segs) s += g.text;
  return s;
}

std::vector<int32_t> xtml_encode(const Tokenizer& tok, const std::vector<XtmlSegment>& segs) {
  for (const char* t : {kOpen, kClose, kSep, kEnd})
    if (!tok.token_id(t) || !tok.is_special(*tok.token_id(t)))
      fail("xtml: the tokenizer has no special token '{}'", t);
  const std::pair<const char*, int32_t> markers[] = {{kOpen, *tok.token_id(kOpen)},
                                                     {kClose, *tok.token_id(kClose)},
                                                     {kSep, *tok.token_id(kSep)},
                                                     {kEnd, *tok.token_id(kEnd)}};
  std::vector<int32_t> out;
  for (const auto& g : segs) {
    if (!g.trusted) {
      auto ids = tok.encode_ordinary(g.text);
      out.insert(out.end(), ids.begin(), ids.end());
      continue;
    }
    // structural segments hold only markers
    std::string_view rest = g.text;
    while (!rest.empty()) {
      bool found = false;
      for (const auto& [m, id] : markers) {
        const std::string_view mv(m);
        if (rest.substr(0, mv.size()) == mv) {
          out.push_back(id);
          rest.remove_prefix(mv.size());
          found = true;
          break;
        }
      }
      if (!found) fail("xtml: structural segment holds text '{}'", rest.substr(0, 40));
    }
  }
  return out;
}

namespace {

// Token stream view: special markers and decoded text runs.
struct Item {
  int kind;  // 0 text, 1 open, 2 close, 3 sep, 4 end
  std::string text;
};

class ReplyParser {
 public:
  ReplyParser(const Tokenizer& tok, const std::vector<int32_t>& ids) {
    int32_t open = *tok.token_id(kOpen), close = *tok.token_id(kClose), sep = *tok.token_id(kSep),
            end = *tok.token_id(kEnd);
    std::vector<int32_t> run;
    auto flush = [&] {
      if (!run.empty()) items_.push_back({0, tok.decode(run)});
      run.clear();
    };
    for (int32_t id : ids) {
      int kind = id == open ? 1 : id == close ? 2 : id == sep ? 3 : id == end ? 4 : 0;
      if (kind == 0) {
        run.push_back(id);
        continue;
      }
      flush();
      items_.push_back({kind, ""});
    }
    flush();
  }

  bool done() const { return p_ >= items_.size(); }
  bool at(int kind) const { return p_ < items_.size() && items_[p_].kind == kind; }
  // text up to the next marker ("" if none)
  std::string text() { return at(0) ? items_[p_++].text : ""; }
  // <|open|>TAG<|sep|> or <|close|>TAG<|sep|>; returns the tag text
  std::string tag(int kind, const char* what) {
    if (!at(kind)) fail("xtml reply: expected {} at item {}", what, p_);
    ++p_;
    std::string t = text();
    if (!at(3)) fail("xtml reply: expected <|sep|> after '{}'", t);
    ++p_;
    return t;
  }
  bool peek_tag(int kind, const std::string& prefix) const {
    if (!at(kind)) return false;
    return p_ + 1 < items_.size() && items_[p_ + 1].kind == 0 && items_[p_ + 1].text.rfind(prefix, 0) == 0;
  }
  size_t pos() const { return p_; }

 private:
  std::vector<Item> items_;
  size_t p_ = 0;
};

std::string attr(const std::string& tag, const std::string& name) {
  const std::string key = " " + name + "=\"";
  size_t b = tag.find(key);
  if (b == std::string::npos) fail("xtml reply: '{}' has no attribute {}", tag, name);
  b += key.size();
  size_t e = tag.find('"', b);
  if (e == std::string::npos) fail("xtml reply: unterminated attribute {} in '{}'", name, tag);
  std::string v = tag.substr(b, e - b), out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v.compare(i, 5, "&amp;") == 0) {
      out += '&';
      i += 4;
    } else if (v.compare(i, 6, "&quot;") == 0) {
      out += '"';
      i += 5;
    } else {
      out += v[i];
    }
  }
  return out;
}

}  // namespace

XtmlReply xtml_parse_reply(const Tokenizer& tok, const std::vector<int32_t>& ids, bool thinking) {
  for (const char* t : {kOpen, kClose, kSep, kEnd})
    if (!tok.token_id(t)) fail("xtml: the tokenizer has no special token '{}'", t);
  ReplyParser p(tok, ids);
  XtmlReply r;
  if (thinking) {
    r.reasoning = p.text();
    if (p.done()) return r;
    if (p.tag(2, "<|close|>think<|sep|>") != "think") fail("xtml reply: expected </think>");
    if (p.done()) return r;
    if (p.tag(1, "<|open|>response<|sep|>") != "response") fail("xtml reply: expected a response channel");
  }
  r.content = p.text();
  if (p.done()) return r;
  if (p.tag(2, "<|close|>response<|sep|>") != "response") fail("xtml reply: expected the end of the response");
  if (p.peek_tag(1, "tools")) {
    p.tag(1, "<|open|>tools<|sep|>");
    while (p.peek_tag(1, "call ")) {
      std::string call = p.tag(1, "<|open|>call");
      XtmlToolCall tc;
      tc.name = attr(call, "tool");
      ojson args = ojson::object();
      bool raw = false;
      while (true) {
        if (p.peek_tag(1, "argument ")) {
          std::string a = p.tag(1, "<|open|>argument");
          std::string key = attr(a, "key"), type = attr(a, "type"), val = p.text();
          if (p.tag(2, "<|close|>argument<|sep|>") != "argument") fail("xtml reply: unterminated argument '{}'", key);
          if (type == "string") {
            args[key] = val;
          } else {
            try {
              check_json_text_depth(val, fmt::format("xtml reply: argument '{}'", key));
              args[key] = ojson::parse(val);
            } catch (const ojson::exception&) {
              fail("xtml reply: argument '{}' of type {} is not valid: '{}'", key, type, val);
            }
          }
        } else if (p.peek_tag(1, "json")) {
          p.tag(1, "<|open|>json");
          tc.arguments = p.text();
          raw = true;
          if (p.tag(2, "<|close|>json<|sep|>") != "json") fail("xtml reply: unterminated json arguments");
        } else {
          break;
        }
      }
      if (!raw) tc.arguments = args.dump();
      if (p.tag(2, "<|close|>call<|sep|>") != "call") fail("xtml reply: unterminated call '{}'", tc.name);
      r.tool_calls.push_back(std::move(tc));
    }
    if (p.done()) return r;
    if (p.tag(2, "<|close|>tools<|sep|>") != "tools") fail("xtml reply: unterminated tools section");
  }
  if (p.done()) return r;
  if (p.tag(2, "<|close|>message<|sep|>") != "message") fail("xtml reply: expected the end of the message");
  if (p.at(4)) r.finished = true;
  return r;
}

std::optional<std::string> xtml_attr(std::string_view tag, std::string_view name) {
  const std::string key = " " + std::string(name) + "=\"";
  const std::string padded = " " + std::string(tag);
  size_t b = padded.find(key);
  if (b == std::string::npos) return std::nullopt;
  b += key.size();
  const size_t e = padded.find('"', b);
  if (e == std::string::npos) return std::nullopt;
  std::string out;
  for (size_t i = b; i < e; ++i) {
    if (padded.compare(i, 5, "&amp;") == 0) {
      out += '&';
      i += 4;
    } else if (padded.compare(i, 6, "&quot;") == 0) {
      out += '"';
      i += 5;
    } else {
      out += padded[i];
    }
  }
  return out;
}

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

}  // namespace

std::optional<XtmlToolCall> xtml_parse_call_text(std::string_view body) {
  const std::string_view sep = kSep, open = kOpen;
  size_t p = body.find(sep);
  if (p == std::string_view::npos) return std::nullopt;
  XtmlToolCall call;
  auto name = xtml_attr(body.substr(0, p), "tool");
  if (!name || name->empty()) return std::nullopt;
  call.name = *name;
  std::string_view rest = body.substr(p + sep.size());
  auto skip_space = [&] {
    while (!rest.empty() && (rest.front() == '\n' || rest.front() == ' ')) rest.remove_prefix(1);
  };
  ojson args = ojson::object();
  bool raw = false;
  for (skip_space(); !rest.empty(); skip_space()) {
    if (raw || !starts_with(rest, open)) return std::nullopt;  // text between arguments, or after a json block
    rest.remove_prefix(open.size());
    const size_t hs = rest.find(sep);
    if (hs == std::string_view::npos) return std::nullopt;
    const std::string_view head = rest.substr(0, hs);
    rest.remove_prefix(hs + sep.size());
    const bool is_arg = starts_with(head, "argument ");
    if (!is_arg && !starts_with(head, "json")) return std::nullopt;
    const std::string end = std::string(kClose) + (is_arg ? "argument" : "json") + kSep;
    const size_t ve = rest.find(end);
    if (ve == std::string_view::npos) return std::nullopt;
    const std::string value(rest.substr(0, ve));
    rest.remove_prefix(ve + end.size());
    if (!is_arg) {
      if (!args.empty()) return std::nullopt;
      call.arguments = value;
      raw = true;
      continue;
    }
    auto key = xtml_attr(head, "key"), type = xtml_attr(head, "type");
    if (!key || !type || args.contains(*key)) return std::nullopt;
    if (*type == "string") {
      args[*key] = value;
      continue;
    }
    if (json_text_depth(value) > kMaxJsonDepth) return std::nullopt;
    ojson v = ojson::parse(value, nullptr, false);
    if (v.is_discarded()) return std::nullopt;
    const bool type_ok = (*type == "number" && v.is_number()) || (*type == "boolean" && v.is_boolean()) ||
                         (*type == "null" && v.is_null()) || (*type == "object" && v.is_object()) ||
                         (*type == "array" && v.is_array());
    if (!type_ok) return std::nullopt;
    args[*key] = std::move(v);
  }
  if (!raw) call.arguments = args.dump(-1, ' ', false, ojson::error_handler_t::replace);  // invalid UTF-8 becomes U+FFFD
  return call;
}

}  // namespace sluice::text
