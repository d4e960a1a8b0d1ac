#include "chat/call_reader.h"

#include <atomic>
#include <cctype>
#include <chrono>
#include <functional>
#include <random>

#include <nlohmann/json.hpp>

#include "text/xtml.h"
#include "util/json_depth.h"

namespace sluice::chat {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string_view trim_call(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Length of the longest tail of `s` that is a proper prefix of `marker`.
size_t call_partial_tail(std::string_view s, std::string_view marker) {
  for (size_t len = std::min(marker.size() - 1, s.size()); len > 0; --len)
    if (s.substr(s.size() - len) == marker.substr(0, len)) return len;
  return 0;
}

// Arguments the final parse trims: leading whitespace is dropped, and a trailing run
// of `hold` characters waits until something else follows (finish() decides on it).
class TrimmedArguments {
 public:
  explicit TrimmedArguments(std::string_view hold = " \t\r\n") : hold_chars_(hold) {}
  std::string feed(std::string_view s) {
    std::string out;
    for (char c : s) {
      if (!started_) {
        if (is_space(c)) continue;
        started_ = true;
      }
      if (hold_chars_.find(c) != std::string_view::npos) {
        held_ += c;
        continue;
      }
      out += held_;
      held_.clear();
      out += c;
    }
    return out;
  }
  std::string& held() { return held_; }

 private:
  std::string_view hold_chars_;
  std::string held_;
  bool started_ = false;
};

// The reader for syntaxes whose head ends at a marker and whose arguments are the
// rest, trimmed (Kimi K2, gpt-oss): `head` turns the head's text into name and id
// (false: not a call).
class MarkedHeadReader : public CallReader {
 public:
  using HeadFn = std::function<bool(std::string_view head, std::string& name, std::string& id)>;
  MarkedHeadReader(std::string marker, HeadFn head) : marker_(std::move(marker)), head_(std::move(head)) {}
  std::string feed(std::string_view text) override {
    if (bad_) return "";
    if (has_head()) return args_.feed(text);
    pending_.append(text);
    const size_t p = pending_.find(marker_);
    if (p == std::string::npos) return "";
    std::string name, id;
    if (!head_(std::string_view(pending_).substr(0, p), name, id)) {
      bad_ = true;
      return "";
    }
    set_head(std::move(name), std::move(id));
    const std::string rest = pending_.substr(p + marker_.size());
    pending_.clear();
    return args_.feed(rest);
  }
  std::optional<std::string> finish() override {
    if (!has_head()) return std::nullopt;
    return std::string();  // the held tail is whitespace
  }

 private:
  std::string marker_;
  HeadFn head_;
  std::string pending_;
  TrimmedArguments args_;
  bool bad_ = false;
};

// DeepSeek-V3: function<｜tool▁sep｜>NAME\n then the arguments, usually fenced in
// ```json ... ```: what the final parse keeps is trim_call(strip_fences(trim_call(text))).
class DeepSeekReader : public CallReader {
 public:
  std::string feed(std::string_view text) override {
    if (bad_) return "";
    if (!has_head()) {
      pending_.append(text);
      const std::string_view sep = "<｜tool▁sep｜>";
      const size_t p = pending_.find(sep);
      if (p == std::string::npos) return "";
      const size_t nl = pending_.find('\n', p + sep.size());
      if (nl == std::string::npos) return "";
      const std::string name(trim_call(std::string_view(pending_).substr(p + sep.size(), nl - p - sep.size())));
      if (name.empty()) {
        bad_ = true;
        return "";
      }
      set_head(name, new_tool_call_id());
      const std::string rest = pending_.substr(nl + 1);
      pending_.clear();
      return arguments(rest);
    }
    return arguments(text);
  }
  std::optional<std::string> finish() override {
    if (bad_) return std::nullopt;
    if (!has_head()) {  // no newline after the name: the whole rest is the name, no arguments
      const std::string_view sep = "<｜tool▁sep｜>";
      const size_t p = pending_.find(sep);
      if (p == std::string::npos) return std::nullopt;
      const std::string name(trim_call(std::string_view(pending_).substr(p + sep.size())));
      if (name.empty()) return std::nullopt;
      set_head(name, new_tool_call_id());
      return std::string();
    }
    std::string out;
    if (!fence_decided_) out += decide_fence();
    std::string_view h = args_.held();
    h = trim_call(h);
    if (h.size() >= 3 && h.substr(h.size() - 3) == "```") h.remove_suffix(3);
    out += std::string(trim_call(h));
    return out;
  }

 private:
  std::string arguments(std::string_view text) {
    std::string out;
    for (char c : text) {
      if (!fence_decided_) {
        if (fence_.empty() && is_space(c)) continue;
        fence_ += c;
        if (fence_.size() < 7 && std::string_view("```json").substr(0, fence_.size()) == fence_) continue;
        out += decide_fence();
        continue;
      }
      out += args_.feed(std::string_view(&c, 1));
    }
    return out;
  }
  // Drops the opening fence (```json or ```) from what was held, and feeds the rest on.
  std::string decide_fence() {
    fence_decided_ = true;
    std::string_view f = fence_;
    if (f.substr(0, 7) == "```json") f.remove_prefix(7);
    else if (f.substr(0, 3) == "```") f.remove_prefix(3);
    return args_.feed(f);
  }

  std::string pending_, fence_;
  bool fence_decided_ = false, bad_ = false;
  TrimmedArguments args_{" \t\r\n`"};
};

// Qwen3: {"name": "NAME", "arguments": {..}}. The head is read with a small
// scanner; anything else (other key order, arguments as a string) is read whole.
class QwenReader : public CallReader {
 public:
  std::string feed(std::string_view text) override {
    raw_.append(text);
    if (whole_) return "";
    if (has_head()) return args_.feed(text);
    size_t at = 0;
    std::string name;
    const Scan s = scan_head(at, name);
    if (s == Scan::More) return "";
    if (s == Scan::No) {
      whole_ = true;
      return "";
    }
    set_head(std::move(name), new_tool_call_id());
    return args_.feed(std::string_view(raw_).substr(at));
  }
  std::optional<std::string> finish() override {
    if (!has_head()) {
      if (json_text_depth(raw_) > kMaxJsonDepth) return std::nullopt;  // its writer recurses
      nlohmann::json j = nlohmann::json::parse(trim_call(raw_), nullptr, false);
      if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
      set_head(j["name"].get<std::string>(), new_tool_call_id());
      const auto& a = j.contains("arguments") ? j["arguments"] : nlohmann::json::object();
      return a.is_string() ? a.get<std::string>() : a.dump();
    }
    // The held tail is whitespace and closing braces: the last brace closes the call's object.
    std::string_view h = trim_call(args_.held());
    if (!h.empty() && h.back() == '}') h.remove_suffix(1);
    return std::string(trim_call(h));
  }

 private:
  enum class Scan { Ok, More, No };
  Scan scan_head(size_t& at, std::string& name) const {
    const std::string_view s = raw_;
    auto ws = [&] {
      while (at < s.size() && is_space(s[at])) ++at;
    };
    auto lit = [&](std::string_view l) {
      ws();
      const std::string_view have = s.substr(at, l.size());
      if (have != l.substr(0, have.size())) return Scan::No;
      if (have.size() < l.size()) return Scan::More;
      at += l.size();
      return Scan::Ok;
    };
    for (std::string_view l : {std::string_view("{"), std::string_view("\"name\""), std::string_view(":")})
      if (Scan r = lit(l); r != Scan::Ok) return r;
    ws();
    if (at >= s.size()) return Scan::More;
    if (s[at] != '"') return Scan::No;
    size_t e = at + 1;
    for (; e < s.size() && s[e] != '"'; ++e)
      if (s[e] == '\\') ++e;
    if (e >= s.size()) return Scan::More;
    nlohmann::json n = nlohmann::json::parse(s.substr(at, e + 1 - at), nullptr, false);
    if (!n.is_string()) return Scan::No;
    at = e + 1;
    for (std::string_view l : {std::string_view(","), std::string_view("\"arguments\""), std::string_view(":")})
      if (Scan r = lit(l); r != Scan::Ok) return r;
    ws();
    if (at >= s.size()) return Scan::More;
    if (s[at] != '{') return Scan::No;  // a string or another value: read whole at the end
    name = n.get<std::string>();
    return Scan::Ok;
  }

  std::string raw_;
  bool whole_ = false;
  TrimmedArguments args_{" \t\r\n}"};
};

// Bytes at the end of `s` that start a UTF-8 character not yet complete.
size_t incomplete_utf8(std::string_view s) {
  for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

// A JSON string's characters escaped as nlohmann writes them, without the quotes.
std::string escaped(std::string_view s) {
  const std::string q = nlohmann::ordered_json(std::string(s)).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  return q.substr(1, q.size() - 2);
}

// Kimi K3 XTML arguments -> the JSON object text xtml_parse_call_text writes for a
// well-formed call (compact, generated order, values re-written by the JSON writer),
// string values streamed as they come. Stray text between arguments is skipped, a
// value that does not parse as its type is kept as a string, and a json block is the
// arguments as written.
class K3Reader : public CallReader {
 public:
  std::string feed(std::string_view text) override {
    buf_.append(text);
    std::string out;
    step(out, false);
    return out;
  }
  std::optional<std::string> finish() override {
    std::string out;
    step(out, true);
    if (!has_head()) return std::nullopt;
    if (state_ == State::String) {
      out += escaped(buf_) + "\"";
    } else if (state_ == State::Value) {
      out += value_text(buf_);
    } else if (state_ == State::Raw) {
      out += buf_;
    }
    buf_.clear();
    if (raw_) return out;
    out += args_ ? "}" : "{}";
    return out;
  }

 private:
  enum class State { Head, Between, Tag, String, Value, Raw, Skip };
  static constexpr std::string_view kOpen = "<|open|>", kSep = "<|sep|>";

  std::string value_text(std::string_view v) const {
    nlohmann::ordered_json j = json_text_depth(v) > kMaxJsonDepth  // its writer recurses: kept as text
                                   ? nlohmann::ordered_json(nlohmann::ordered_json::value_t::discarded)
                                   : nlohmann::ordered_json::parse(v, nullptr, false);
    const bool ok = !j.is_discarded() && ((type_ == "number" && j.is_number()) || (type_ == "boolean" && j.is_boolean()) ||
                                          (type_ == "null" && j.is_null()) || (type_ == "object" && j.is_object()) ||
                                          (type_ == "array" && j.is_array()));
    if (!ok) return "\"" + escaped(v) + "\"";
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }

  // Consumes buf_ as far as it is decided.
  void step(std::string& out, bool final) {
    for (;;) {
      switch (state_) {
        case State::Head: {
          const size_t p = buf_.find(kSep);
          if (p == std::string::npos) return;
          auto name = text::xtml_attr(std::string_view(buf_).substr(0, p), "tool");
          if (!name || name->empty()) {  // not a call: the parser shows its text
            state_ = State::Skip;
            end_ = "\x01";  // never found: the rest is ignored
            return;
          }
          set_head(*name, new_tool_call_id());
          buf_.erase(0, p + kSep.size());
          state_ = State::Between;
          continue;
        }
        case State::Between: {
          size_t i = 0;
          while (i < buf_.size() && buf_.compare(i, kOpen.size(), kOpen) != 0) {
            if (kOpen.substr(0, buf_.size() - i) == std::string_view(buf_).substr(i)) break;  // a start of <|open|>
            ++i;
          }
          buf_.erase(0, i);  // stray text between arguments is skipped
          if (buf_.size() < kOpen.size()) return;
          buf_.erase(0, kOpen.size());
          state_ = State::Tag;
          continue;
        }
        case State::Tag: {
          const size_t p = buf_.find(kSep);
          if (p == std::string::npos) return;
          const std::string tag = buf_.substr(0, p);
          buf_.erase(0, p + kSep.size());
          const std::string kind = tag.substr(0, tag.find(' '));
          end_ = "<|close|>" + kind + "<|sep|>";
          if (kind == "argument" && !raw_) {
            const auto key = text::xtml_attr(tag, "key");
            type_ = text::xtml_attr(tag, "type").value_or("string");
            out += args_ ? "," : "{";
            args_ = true;
            out += nlohmann::ordered_json(key.value_or("")).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + ":";
            if (type_ == "string") out += "\"";
            state_ = type_ == "string" ? State::String : State::Value;
          } else if (kind == "json" && !raw_ && !args_) {
            raw_ = true;
            state_ = State::Raw;
          } else {
            state_ = State::Skip;
          }
          continue;
        }
        case State::String:
        case State::Value:
        case State::Raw:
        case State::Skip: {
          const size_t p = buf_.find(end_);
          if (p == std::string::npos) {
            if (final) return;  // finish() writes what is left
            if (state_ == State::String || state_ == State::Raw) {
              size_t keep = call_partial_tail(buf_, end_);
              if (state_ == State::String) keep += incomplete_utf8(std::string_view(buf_).substr(0, buf_.size() - keep));
              const std::string_view ready = std::string_view(buf_).substr(0, buf_.size() - keep);
              out += state_ == State::String ? escaped(ready) : std::string(ready);
              buf_.erase(0, ready.size());
            }
            return;
          }
          const std::string_view v = std::string_view(buf_).substr(0, p);
          if (state_ == State::String) out += escaped(v) + "\"";
          else if (state_ == State::Value) out += value_text(v);
          else if (state_ == State::Raw) out += std::string(v);
          buf_.erase(0, p + end_.size());
          state_ = State::Between;
          continue;
        }
      }
    }
  }

  State state_ = State::Head;
  std::string buf_, end_, type_;
  bool args_ = false, raw_ = false;
};

}  // namespace

std::string new_tool_call_id() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}() ^ uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  std::mt19937_64 g(salt + counter.fetch_add(1));
  static const char* chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += chars[g() % 62];
  return id;
}

std::unique_ptr<CallReader> deepseek_v3_call_reader() { return std::make_unique<DeepSeekReader>(); }

std::unique_ptr<CallReader> kimi_k2_call_reader() {
  return std::make_unique<MarkedHeadReader>("<|tool_call_argument_begin|>", [](std::string_view head, std::string& name, std::string& id) {
    id = std::string(trim_call(head));  // functions.NAME:IDX
    std::string_view n = id;
    if (n.substr(0, 10) == "functions.") n.remove_prefix(10);
    const size_t colon = n.rfind(':');
    if (colon != std::string_view::npos) n = n.substr(0, colon);
    name = std::string(n);
    return !name.empty();
  });
}

std::unique_ptr<CallReader> qwen3_call_reader() { return std::make_unique<QwenReader>(); }

std::unique_ptr<CallReader> kimi_k3_call_reader() { return std::make_unique<K3Reader>(); }

std::unique_ptr<CallReader> gpt_oss_call_reader() {
  return std::make_unique<MarkedHeadReader>("<|message|>", [](std::string_view head, std::string& name, std::string& id) {
    const size_t end = head.find_first_of(" <");
    if (end == 0 || head.empty()) return false;
    name = std::string(head.substr(0, end));
    id = new_tool_call_id();
    return true;
  });
}

}  // namespace sluice::chat
