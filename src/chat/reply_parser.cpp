#include "chat/reply_parser.h"

#include <atomic>
#include <chrono>
#include <random>

#include <nlohmann/json.hpp>

#include "text/xtml.h"

namespace sluice::chat {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool all_space(std::string_view s) { return trim(s).empty(); }

// Length of the longest tail of `s` that is a proper prefix of `marker`.
size_t partial_tail(std::string_view s, std::string_view marker) {
  if (marker.empty()) return 0;
  for (size_t len = std::min(marker.size() - 1, s.size()); len > 0; --len)
    if (s.substr(s.size() - len) == marker.substr(0, len)) return len;
  return 0;
}

}  // namespace

void ReplyDelta::append(ReplyDelta&& o) {
  content += o.content;
  reasoning += o.reasoning;
  for (auto& c : o.tool_calls) tool_calls.push_back(std::move(c));
}

std::string new_tool_call_id() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}() ^ uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  std::mt19937_64 g(salt + counter.fetch_add(1));
  static const char* chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += chars[g() % 62];
  return id;
}

ReplySyntax deepseek_v3_syntax() {
  ReplySyntax s;
  s.name = "deepseek_v3";
  s.section_begin = "<｜tool▁calls▁begin｜>";
  s.section_end = "<｜tool▁calls▁end｜>";
  s.call_begin = "<｜tool▁call▁begin｜>";
  s.call_end = "<｜tool▁call▁end｜>";
  s.parse_call = [](std::string_view body) -> std::optional<ToolCall> {
    const std::string_view sep = "<｜tool▁sep｜>";
    auto p = body.find(sep);
    if (p == std::string_view::npos) return std::nullopt;
    std::string_view rest = body.substr(p + sep.size());
    auto nl = rest.find('\n');
    ToolCall c;
    c.id = new_tool_call_id();
    c.name = std::string(trim(rest.substr(0, nl)));
    std::string_view args = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    args = trim(args);
    if (args.substr(0, 7) == "```json") args.remove_prefix(7);
    else if (args.substr(0, 3) == "```") args.remove_prefix(3);
    if (args.size() >= 3 && args.substr(args.size() - 3) == "```") args.remove_suffix(3);
    c.arguments = std::string(trim(args));
    if (c.name.empty()) return std::nullopt;
    return c;
  };
  return s;
}

ReplySyntax kimi_k2_syntax() {
  ReplySyntax s;
  s.name = "kimi_k2";
  s.section_begin = "<|tool_calls_section_begin|>";
  s.section_end = "<|tool_calls_section_end|>";
  s.call_begin = "<|tool_call_begin|>";
  s.call_end = "<|tool_call_end|>";
  s.parse_call = [](std::string_view body) -> std::optional<ToolCall> {
    const std::string_view sep = "<|tool_call_argument_begin|>";
    auto p = body.find(sep);
    if (p == std::string_view::npos) return std::nullopt;
    ToolCall c;
    c.id = std::string(trim(body.substr(0, p)));  // functions.NAME:IDX
    std::string_view name = c.id;
    if (name.substr(0, 10) == "functions.") name.remove_prefix(10);
    auto colon = name.rfind(':');
    if (colon != std::string_view::npos) name = name.substr(0, colon);
    c.name = std::string(name);
    c.arguments = std::string(trim(body.substr(p + sep.size())));
    if (c.name.empty()) return std::nullopt;
    return c;
  };
  return s;
}

ReplySyntax qwen3_syntax() {
  ReplySyntax s;
  s.name = "qwen3";
  s.call_begin = "<tool_call>";
  s.call_end = "</tool_call>";
  s.parse_call = [](std::string_view body) -> std::optional<ToolCall> {
    nlohmann::json j = nlohmann::json::parse(trim(body), nullptr, false);
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
    ToolCall c;
    c.id = new_tool_call_id();
    c.name = j["name"].get<std::string>();
    const auto& a = j.contains("arguments") ? j["arguments"] : nlohmann::json::object();
    c.arguments = a.is_string() ? a.get<std::string>() : a.dump();
    return c;
  };
  return s;
}

ReplySyntax kimi_k3_syntax() {
  ReplySyntax s;
  s.name = "kimi_k3";
  s.think_begin.clear();  // the generation prompt opens the thinking channel (starts_in_reasoning)
  s.think_end = "<|close|>think<|sep|>";
  s.drop_markers = {"<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>"};
  s.section_begin = "<|open|>tools<|sep|>";
  s.section_end = "<|close|>tools<|sep|>";
  s.call_begin = "<|open|>call ";
  s.call_end = "<|close|>call<|sep|>";
  s.parse_call = [](std::string_view body) -> std::optional<ToolCall> {
    auto c = text::xtml_parse_call_text(body);
    if (!c) return std::nullopt;
    return ToolCall{new_tool_call_id(), c->name, c->arguments};
  };
  return s;
}

ReplySyntax gpt_oss_syntax() {
  ReplySyntax s;
  s.name = "gpt_oss";
  s.think_begin = "<|channel|>analysis<|message|>";
  s.think_end = "<|end|>";
  // Message headers between the reasoning and the answer, and a preamble's, are not content.
  s.drop_markers = {"<|start|>assistant", "<|channel|>final<|message|>", "<|channel|>commentary<|message|>",
                    "<|channel|>commentary ", "<|end|>"};
  // Both placements of the recipient share this; the call ends where generation
  // stops (<|call|> is a stop token), or at <|call|> when it is shown.
  s.call_begin = "to=functions.";
  s.call_end = "<|call|>";
  s.parse_call = [](std::string_view body) -> std::optional<ToolCall> {
    const std::string_view msg = "<|message|>";
    const auto m = body.find(msg);
    if (m == std::string_view::npos) return std::nullopt;
    const auto name_end = body.find_first_of(" <", 0);
    if (name_end == 0 || name_end > m) return std::nullopt;
    ToolCall c;
    c.id = new_tool_call_id();
    c.name = std::string(body.substr(0, name_end));
    c.arguments = std::string(trim(body.substr(m + msg.size())));
    return c;
  };
  return s;
}

ReplyParser::ReplyParser(ReplySyntax syntax, bool tools)
    : syn_(std::move(syntax)), tools_(tools && !syn_.call_begin.empty()),
      mode_(syn_.starts_in_reasoning ? Mode::Reasoning : Mode::Content) {}

void ReplyParser::emit_text(ReplyDelta& out, std::string_view text) {
  // Whitespace is held until something visible follows, so a reply that is only
  // tool calls has no stray newlines as content.
  if (after_think_) {  // the newlines that usually follow </think> are not content
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
    if (text.empty()) return;
    after_think_ = false;
  }
  // Trailing whitespace is held too, whatever precedes it in this piece, so the
  // result does not depend on where the text was cut into pieces.
  size_t body = text.size();
  while (body > 0 && std::isspace(static_cast<unsigned char>(text[body - 1]))) --body;
  if (body == 0) {
    ws_.append(text);
    return;
  }
  out.content += ws_;
  out.content.append(text.substr(0, body));
  ws_.assign(text.substr(body));
  any_content_ = true;
}

void ReplyParser::step(ReplyDelta& out, bool final) {
  const std::string& open_calls = syn_.section_begin.empty() ? syn_.call_begin : syn_.section_begin;
  for (;;) {
    std::string_view b = buf_;
    switch (mode_) {
      case Mode::Content: {
        // Markers that change mode from here.
        size_t best = std::string::npos;
        const std::string* which = nullptr;
        auto consider = [&](const std::string& m) {
          if (m.empty()) return;
          auto p = b.find(m);
          if (p < best) best = p, which = &m;
        };
        // <think> opens reasoning only at the very start of the reply.
        const bool think_ok = !any_content_ && calls_ == 0 && !syn_.think_begin.empty();
        if (think_ok) {
          auto p = b.find(syn_.think_begin);
          if (p != std::string_view::npos && all_space(b.substr(0, p))) best = p, which = &syn_.think_begin;
        }
        if (tools_) consider(open_calls);
        for (const auto& m : syn_.drop_markers) consider(m);
        if (which) {
          emit_text(out, b.substr(0, best));
          buf_.erase(0, best + which->size());
          if (which == &syn_.think_begin) mode_ = Mode::Reasoning;
          else if (which != &open_calls) continue;  // a dropped marker: still content
          else mode_ = syn_.section_begin.empty() ? Mode::Call : Mode::Section;
          continue;
        }
        size_t hold = 0;
        if (!final) {
          if (think_ok) {
            const size_t t = partial_tail(b, syn_.think_begin);
            if (t > 0 && all_space(b.substr(0, b.size() - t))) hold = std::max(hold, t);
          }
          if (tools_) hold = std::max(hold, partial_tail(b, open_calls));
          for (const auto& m : syn_.drop_markers) hold = std::max(hold, partial_tail(b, m));
        }
        emit_text(out, b.substr(0, b.size() - hold));
        buf_.erase(0, b.size() - hold);
        return;
      }
      case Mode::Reasoning: {
        auto p = b.find(syn_.think_end);
        if (p != std::string_view::npos) {
          out.reasoning.append(b.substr(0, p));
          buf_.erase(0, p + syn_.think_end.size());
          after_think_ = true;
          mode_ = Mode::Content;
          continue;
        }
        const size_t hold = final ? 0 : partial_tail(b, syn_.think_end);
        out.reasoning.append(b.substr(0, b.size() - hold));
        buf_.erase(0, b.size() - hold);
        return;
      }
      case Mode::Section: {
        auto pc = b.find(syn_.call_begin), pe = b.find(syn_.section_end);
        if (pc != std::string_view::npos && (pe == std::string_view::npos || pc < pe)) {
          buf_.erase(0, pc + syn_.call_begin.size());
          mode_ = Mode::Call;
          continue;
        }
        if (pe != std::string_view::npos) {
          buf_.erase(0, pe + syn_.section_end.size());
          mode_ = Mode::Content;
          continue;
        }
        if (final) {
          emit_text(out, trim(b));  // stray text in an unterminated section
          buf_.clear();
        }
        return;
      }
      case Mode::Call: {
        auto p = b.find(syn_.call_end);
        if (p == std::string_view::npos && !final) return;
        std::string_view body = b.substr(0, p);
        auto call = syn_.parse_call(body);
        if (call) {
          out.tool_calls.push_back(std::move(*call));
          ++calls_;
        } else {
          // Not a call after all: keep the text visible rather than lose it.
          emit_text(out, syn_.call_begin);
          emit_text(out, body);
          if (p != std::string_view::npos) emit_text(out, syn_.call_end);
        }
        if (p == std::string_view::npos) {
          buf_.clear();
          return;
        }
        buf_.erase(0, p + syn_.call_end.size());
        mode_ = syn_.section_begin.empty() ? Mode::Content : Mode::Section;
        continue;
      }
    }
  }
}

ReplyDelta ReplyParser::push(std::string_view text) {
  ReplyDelta out;
  buf_.append(text);
  step(out, false);
  return out;
}

ReplyDelta ReplyParser::finish() {
  ReplyDelta out;
  step(out, true);
  if (calls_ == 0) out.content += ws_;
  ws_.clear();
  return out;
}

}  // namespace sluice::chat
