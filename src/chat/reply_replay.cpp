#include "chat/reply_replay.h"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

#include "util/json_depth.h"
#include "util/xxh3.h"

namespace sluice::chat {

using nlohmann::json;

namespace {

constexpr size_t kEntryOverhead = 256;  // the entry's own bookkeeping, counted in its bytes
constexpr int kMaxCandidates = 4;       // stored replies tried per request (each costs two renders)

std::string_view trim_replay(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string hex128(std::string_view data) {
  const xxh3::Hash128 h = xxh3::hash128(data.data(), data.size());
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

// A call id without its prefix: the Anthropic writer returns call_X as toolu_X.
std::string call_id(const std::string& id) {
  const size_t u = id.find('_');
  return u == std::string::npos ? id : id.substr(u + 1);
}

// Arguments as a JSON value (key order and spacing do not matter), or the text when it is not JSON.
json arguments_value(const std::string& text) {
  if (json_text_depth(text) <= kMaxJsonDepth) {
    json v = json::parse(text, nullptr, false);
    if (!v.is_discarded()) return v;
  }
  return text;
}

std::string string_or_empty(const json& m, const char* key) {
  auto it = m.find(key);
  return it != m.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string key_of(const std::vector<std::string>& ids, std::string_view content) {
  if (!ids.empty()) {
    std::string k = "calls:";
    for (const auto& id : ids) k += call_id(id) + ',';
    return k;
  }
  const uint64_t h = xxh3::hash64(trim_replay(content).data(), trim_replay(content).size());
  return fmt::format("text:{:016x}", h);
}

}  // namespace

json ReplyReplay::canonical_message(const json& m) {
  json o = json::object();
  o["role"] = m.value("role", json());
  o["content"] = m.value("content", json());
  if (m.contains("reasoning_content")) o["reasoning_content"] = m["reasoning_content"];
  if (m.contains("name")) o["name"] = m["name"];
  if (m.contains("tool_call_id") && m["tool_call_id"].is_string()) o["tool_call_id"] = call_id(m["tool_call_id"].get<std::string>());
  if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
    json calls = json::array();
    for (const auto& c : m["tool_calls"]) {
      const json f = c.value("function", json::object());
      calls.push_back({{"id", call_id(string_or_empty(c, "id"))},
                       {"name", f.value("name", json())},
                       {"arguments", arguments_value(string_or_empty(f, "arguments"))}});
    }
    o["tool_calls"] = std::move(calls);
  }
  return o;
}

bool ReplyReplay::same_reply(const json& sent, const GeneratedReply& reply) {
  if (sent.value("role", "") != "assistant") return false;
  const json calls = sent.contains("tool_calls") && sent["tool_calls"].is_array() ? sent["tool_calls"] : json::array();
  if (calls.size() != reply.calls.size()) return false;
  for (size_t j = 0; j < calls.size(); ++j) {
    const json f = calls[j].value("function", json::object());
    const ToolCall& g = reply.calls[j];
    if (call_id(string_or_empty(calls[j], "id")) != call_id(g.id)) return false;
    if (string_or_empty(f, "name") != g.name) return false;
    if (arguments_value(string_or_empty(f, "arguments")) != arguments_value(g.arguments)) return false;
  }
  if (trim_replay(string_or_empty(sent, "content")) != trim_replay(reply.content)) return false;
  // Reasoning not sent back is restored; reasoning sent back must be the generated one.
  const std::string reasoning = string_or_empty(sent, "reasoning_content");
  return trim_replay(reasoning).empty() || trim_replay(reasoning) == trim_replay(reply.reasoning);
}

std::vector<std::string> ReplyReplay::digests(const json& messages, const json& tools, const ChatOptions& opts) {
  std::vector<std::string> out;
  out.reserve(messages.size() + 1);
  const bool has_tools = tools.is_array() && !tools.empty();
  out.push_back(hex128((has_tools ? dump(tools) : std::string()) + '\x1f' + opts.reasoning_effort));
  for (const auto& m : messages) out.push_back(hex128(out.back() + dump(canonical_message(m))));
  return out;
}

std::string ReplyReplay::reply_key(const json& m) {
  if (m.value("role", "") != "assistant") return {};
  std::vector<std::string> ids;
  if (m.contains("tool_calls") && m["tool_calls"].is_array())
    for (const auto& c : m["tool_calls"]) ids.push_back(string_or_empty(c, "id"));
  return key_of(ids, string_or_empty(m, "content"));
}

std::optional<std::vector<int32_t>> ReplyReplay::tail_after(const json& messages, size_t i, const json& tools,
                                                            const ChatOptions& opts,
                                                            const std::vector<int32_t>& rendered,
                                                            const std::vector<int32_t>& generated) const {
  const std::string mark = "\x01replay\x01";
  // Where the rendering with the reply replaced by `alt` comes back to `rendered`: the start
  // of their common end (taken after their common start, which ends inside the reply).
  auto converges_at = [&](const json& alt) -> std::optional<size_t> {
    json ms = messages;
    ms[i] = alt;
    std::vector<int32_t> r;
    try {
      r = codec_.render_chat(ms, tools, opts);
    } catch (const std::exception&) {
      return std::nullopt;
    }
    if (r == rendered) return std::nullopt;
    size_t p = 0;
    while (p < r.size() && p < rendered.size() && r[p] == rendered[p]) ++p;
    size_t c = 0;
    while (c < r.size() - p && c < rendered.size() - p && r[r.size() - 1 - c] == rendered[rendered.size() - 1 - c]) ++c;
    return rendered.size() - c;
  };
  const json& m = messages[i];
  // A plain text turn: what follows it is the template's rendering of the messages after the
  // reply, and its end-of-turn marker (when the template writes one).
  const auto a = converges_at(json{{"role", "assistant"}, {"content", mark}});
  // A turn of the same shape (the same calls, names and ids, with other arguments; other text
  // and reasoning): it comes back inside the reply, before its closing markup.
  json same = m;
  if (same.contains("reasoning_content")) same["reasoning_content"] = mark;
  const bool calls = same.contains("tool_calls") && same["tool_calls"].is_array() && !same["tool_calls"].empty();
  if (calls) {
    for (auto& c : same["tool_calls"])
      if (c.contains("function") && c["function"].is_object()) c["function"]["arguments"] = "{\"replay\": \"\\u0001\"}";
    if (!trim_replay(string_or_empty(same, "content")).empty()) same["content"] = mark;
  } else {
    same["content"] = mark;
  }
  const auto b = converges_at(same);
  if (!a || !b || *b > *a) return std::nullopt;
  // Between the two lies the reply's closing markup. A marker there that the model did not
  // generate (the next message's start) means the messages after the reply render otherwise
  // after a turn of another shape: its end cannot be told.
  for (size_t k = *b; k < *a; ++k)
    if (codec_.is_marker(rendered[k]) &&
        std::find(generated.begin(), generated.end(), rendered[k]) == generated.end())
      return std::nullopt;
  // The reply's end-of-turn marker, when the template writes it, is the model's last token.
  const size_t rest = rendered.size() - *a;
  size_t k = std::min(generated.size(), rest);
  while (k > 0 && !std::equal(generated.end() - std::ptrdiff_t(k), generated.end(), rendered.begin() + std::ptrdiff_t(*a)))
    --k;
  if (k == 0 && rest > 0) {
    // The template ends the turn with another end-of-turn token than the one generated.
    const auto stops = codec_.stop_ids();
    if (std::find(stops.begin(), stops.end(), rendered[*a]) != stops.end()) return std::nullopt;
  }
  return std::vector<int32_t>(rendered.begin() + std::ptrdiff_t(*a + k), rendered.end());
}

std::optional<ReplyReplay::Replayed> ReplyReplay::apply(const json& messages, const json& tools,
                                                        const ChatOptions& opts,
                                                        const std::vector<int32_t>& rendered) {
  if (max_bytes_ == 0 || !messages.is_array() || messages.size() < 2) return std::nullopt;
  {
    std::lock_guard lk(mu_);
    if (index_.empty()) return std::nullopt;
  }
  const auto ds = digests(messages, tools, opts);
  int tried = 0;
  // The latest reply first: its stored prompt holds the earlier replayed ones. The last
  // message is not replayed (a reply to continue is rendered as sent).
  for (size_t i = messages.size() - 1; i-- > 0 && tried < kMaxCandidates;) {
    const json& m = messages[i];
    if (m.value("role", "") != "assistant") continue;
    const std::string key = ds[i] + '|' + reply_key(m);
    std::vector<int32_t> prompt;
    GeneratedReply reply;
    {
      std::lock_guard lk(mu_);
      auto it = index_.find(key);
      if (it == index_.end()) continue;
      prompt = it->second->prompt;
      reply = it->second->reply;
    }
    if (!same_reply(m, reply)) continue;
    ++tried;
    auto tail = tail_after(messages, i, tools, opts, rendered, reply.tokens);
    if (!tail) continue;
    Replayed out;
    out.tokens = int64_t(prompt.size() + reply.tokens.size());
    out.message = i;
    out.prompt = std::move(prompt);
    out.prompt.insert(out.prompt.end(), reply.tokens.begin(), reply.tokens.end());
    out.prompt.insert(out.prompt.end(), tail->begin(), tail->end());
    std::lock_guard lk(mu_);
    if (auto it = index_.find(key); it != index_.end()) lru_.splice(lru_.begin(), lru_, it->second);
    return out;
  }
  return std::nullopt;
}

bool ReplyReplay::record(const json& messages, const json& tools, const ChatOptions& opts,
                         const std::vector<int32_t>& prompt, const GeneratedReply& reply) {
  if (max_bytes_ == 0 || !reply.ended_by_stop_token || reply.tokens.empty() || !messages.is_array()) return false;
  std::vector<std::string> ids;
  for (const auto& c : reply.calls) ids.push_back(c.id);
  Entry e;
  e.key = digests(messages, tools, opts).back() + '|' + key_of(ids, reply.content);
  e.prompt = prompt;
  e.reply = reply;
  e.bytes = kEntryOverhead + e.key.size() + (prompt.size() + reply.tokens.size()) * sizeof(int32_t) +
            reply.content.size() + reply.reasoning.size();
  for (const auto& c : reply.calls) e.bytes += c.id.size() + c.name.size() + c.arguments.size();
  if (e.bytes > max_bytes_) return false;
  std::lock_guard lk(mu_);
  if (auto it = index_.find(e.key); it != index_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  bytes_ += e.bytes;
  const std::string key = e.key;
  lru_.push_front(std::move(e));
  index_[key] = lru_.begin();
  while (bytes_ > max_bytes_ && !lru_.empty()) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  return true;
}

size_t ReplyReplay::size() const {
  std::lock_guard lk(mu_);
  return lru_.size();
}

size_t ReplyReplay::bytes() const {
  std::lock_guard lk(mu_);
  return bytes_;
}

}  // namespace sluice::chat
