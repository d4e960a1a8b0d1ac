#include "server/response.h"

#include <cmath>
#include <random>

#include "server/freeform_tools.h"
#include "text/utf8.h"

namespace sluice::server {

using chat::ChatCodec;
using chat::LogprobEntry;
using chat::Outcome;
using chat::ReplyDelta;
using chat::ToolCall;

using nlohmann::json;

std::string new_response_id(const char* prefix) {
  static thread_local std::mt19937_64 g(std::random_device{}());
  static const char* chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += chars[g() % 62];
  return id;
}

std::string to_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
std::string sse_event(const json& j) { return "data: " + to_text(j) + "\n\n"; }

json usage_json(const Outcome& o) {
  return {{"prompt_tokens", o.prompt_tokens},
          {"completion_tokens", o.completion_tokens},
          {"total_tokens", o.prompt_tokens + o.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}},
          {"completion_tokens_details", {{"reasoning_tokens", o.reasoning_tokens}}}};
}

json tool_calls_json(const std::vector<ToolCall>& calls, size_t first_index, bool for_delta,
                    const std::set<std::string>& freeform) {
  json a = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c = freeform.count(calls[i].name)
                 ? json{{"id", calls[i].id},
                        {"type", "custom"},
                        {"custom", {{"name", calls[i].name}, {"input", freeform_input(calls[i].arguments)}}}}
                 : json{{"id", calls[i].id},
                        {"type", "function"},
                        {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (for_delta) c["index"] = first_index + i;
    a.push_back(std::move(c));
  }
  return a;
}

namespace {
json bytes_json(const std::string& b) {
  json a = json::array();
  for (unsigned char c : b) a.push_back(int(c));
  return a;
}
}  // namespace

json chat_logprobs_json(const std::vector<LogprobEntry>& entries, const ChatCodec& codec) {
  json content = json::array();
  for (const auto& e : entries) {
    const std::string b = codec.token_bytes(e.token);
    json top = json::array();
    for (const auto& t : e.top) {
      const std::string tb = codec.token_bytes(t.token);
      top.push_back({{"token", text::utf8_sanitize(tb)}, {"logprob", t.logprob}, {"bytes", bytes_json(tb)}});
    }
    content.push_back({{"token", text::utf8_sanitize(b)}, {"logprob", e.logprob}, {"bytes", bytes_json(b)}, {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

namespace {
// A token as a completions logprobs string: its text, or when its bytes are not
// UTF-8 on their own (a piece of a character) "bytes:" and their \xNN escapes,
// as OpenAI writes them, so two such tokens never share a top_logprobs key.
std::string token_string(const std::string& bytes) {
  if (text::utf8_sanitize(bytes) == bytes) return bytes;
  std::string s = "bytes:";
  static const char* hex = "0123456789abcdef";
  for (unsigned char c : bytes) s += {'\\', 'x', hex[c >> 4], hex[c & 15]};
  return s;
}
}  // namespace

json completion_logprobs_json(const std::vector<LogprobEntry>& entries, const ChatCodec& codec, size_t offset) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (const auto& e : entries) {
    // Offsets count the text's bytes (a piece of a character counts as U+FFFD, as in the text).
    const std::string b = text::utf8_sanitize(codec.token_bytes(e.token));
    tokens.push_back(token_string(codec.token_bytes(e.token)));
    if (std::isnan(e.logprob)) {  // a scored prompt's first token: nothing before it
      lps.push_back(nullptr);
      tops.push_back(nullptr);
      offs.push_back(offset);
      offset += b.size();
      continue;
    }
    lps.push_back(e.logprob);
    json top = json::object();
    for (const auto& t : e.top) top[token_string(codec.token_bytes(t.token))] = t.logprob;
    tops.push_back(top);
    offs.push_back(offset);
    offset += b.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

void ReplyAccumulator::add(const ReplyDelta& d, const std::vector<LogprobEntry>& lp) {
  ReplyDelta c = d;
  reply.append(std::move(c));
  logprobs.insert(logprobs.end(), lp.begin(), lp.end());
}

json chat_completion_json(const ResponseMeta& m, const ReplyAccumulator& acc, const Outcome& o, bool logprobs,
                          const ChatCodec& codec, const std::set<std::string>& freeform) {
  json msg = {{"role", "assistant"}, {"content", acc.reply.content}, {"refusal", nullptr}};
  if (!acc.reply.reasoning.empty()) msg["reasoning_content"] = acc.reply.reasoning;
  if (!acc.reply.tool_calls.empty()) {
    msg["tool_calls"] = tool_calls_json(acc.reply.tool_calls, 0, false, freeform);
    if (acc.reply.content.empty()) msg["content"] = nullptr;
  }
  json choice = {{"index", 0},
                 {"message", msg},
                 {"logprobs", logprobs ? chat_logprobs_json(acc.logprobs, codec) : json()},
                 {"finish_reason", o.finish_reason}};
  return {{"id", m.id},         {"object", "chat.completion"}, {"created", m.created}, {"model", m.model},
          {"choices", json::array({choice})}, {"usage", usage_json(o)},       {"system_fingerprint", nullptr}};
}

json completion_json(const ResponseMeta& m, const std::string& text, const ReplyAccumulator& acc, const Outcome& o,
                     bool logprobs, const ChatCodec& codec, size_t echo_bytes) {
  json choice = {{"text", text},
                 {"index", 0},
                 {"logprobs", !logprobs                    ? json()
                              : !o.prompt_logprobs.empty() ? completion_logprobs_json(o.prompt_logprobs, codec, 0)
                                                           : completion_logprobs_json(acc.logprobs, codec, echo_bytes)},
                 {"finish_reason", o.finish_reason}};
  return {{"id", m.id},         {"object", "text_completion"}, {"created", m.created}, {"model", m.model},
          {"choices", json::array({choice})}, {"usage", usage_json(o)},       {"system_fingerprint", nullptr}};
}

json chat_chunk_json(const ResponseMeta& m, json delta, const json& finish_reason, const json& logprobs,
                     bool include_usage) {
  json choice = {{"index", 0}, {"delta", std::move(delta)}, {"logprobs", logprobs}, {"finish_reason", finish_reason}};
  json c = {{"id", m.id},          {"object", "chat.completion.chunk"}, {"created", m.created},
            {"model", m.model},    {"choices", json::array({choice})},               {"system_fingerprint", nullptr}};
  if (include_usage) c["usage"] = nullptr;
  return c;
}

json completion_chunk_json(const ResponseMeta& m, const std::string& text, const json& finish_reason,
                           const json& logprobs, bool include_usage) {
  json choice = {{"text", text}, {"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish_reason}};
  json c = {{"id", m.id},       {"object", "text_completion"}, {"created", m.created},
            {"model", m.model}, {"choices", json::array({choice})},         {"system_fingerprint", nullptr}};
  if (include_usage) c["usage"] = nullptr;
  return c;
}

json usage_chunk_json(const ResponseMeta& m, const char* object, const Outcome& o) {
  return {{"id", m.id},   {"object", object},         {"created", m.created}, {"model", m.model},
          {"choices", json::array()}, {"usage", usage_json(o)}, {"system_fingerprint", nullptr}};
}

}  // namespace sluice::server
