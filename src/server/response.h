// OpenAI response bodies and server-sent-event chunks for chat completions and
// completions, built from the generator's output.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_codec.h"
#include "chat/reply_stream.h"

namespace sluice::server {

struct ResponseMeta {
  std::string id;  // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;
  std::string model;
};

std::string new_response_id(const char* prefix);  // prefix + 24 random alphanumerics

nlohmann::json usage_json(const chat::Outcome& o);
// Calls of `freeform` tools are written as custom tool calls ({type: "custom", custom: {name, input}}).
nlohmann::json tool_calls_json(const std::vector<chat::ToolCall>& calls, size_t first_index, bool for_delta,
                               const std::set<std::string>& freeform = {});

// Chat logprobs: {"content": [{token, logprob, bytes, top_logprobs: [...]}, ...]}.
nlohmann::json chat_logprobs_json(const std::vector<chat::LogprobEntry>& entries, const chat::ChatCodec& codec);
// Completions logprobs: {tokens, token_logprobs, top_logprobs, text_offset}; offsets start at `offset`.
// A token whose bytes are not UTF-8 on their own is written as "bytes:" and a \xNN escape per byte
// (as OpenAI's completions API writes them), so such tokens keep distinct top_logprobs keys.
nlohmann::json completion_logprobs_json(const std::vector<chat::LogprobEntry>& entries, const chat::ChatCodec& codec,
                                        size_t offset);

// Accumulates a whole reply for a non-streamed response.
struct ReplyAccumulator {
  chat::ReplyDelta reply;
  std::vector<chat::LogprobEntry> logprobs;
  void add(const chat::ReplyDelta& d, const std::vector<chat::LogprobEntry>& lp);
};

nlohmann::json chat_completion_json(const ResponseMeta& m, const ReplyAccumulator& acc, const chat::Outcome& o,
                                    bool logprobs, const chat::ChatCodec& codec,
                                    const std::set<std::string>& freeform = {});
nlohmann::json completion_json(const ResponseMeta& m, const std::string& text, const ReplyAccumulator& acc,
                               const chat::Outcome& o, bool logprobs, const chat::ChatCodec& codec, size_t echo_bytes);

// One streamed chat chunk carrying `delta` (an object) and optionally finish_reason / logprobs.
nlohmann::json chat_chunk_json(const ResponseMeta& m, nlohmann::json delta, const nlohmann::json& finish_reason,
                               const nlohmann::json& logprobs, bool include_usage);
nlohmann::json completion_chunk_json(const ResponseMeta& m, const std::string& text, const nlohmann::json& finish_reason,
                                     const nlohmann::json& logprobs, bool include_usage);
// The last chunk when stream_options.include_usage: no choices, usage set.
nlohmann::json usage_chunk_json(const ResponseMeta& m, const char* object, const chat::Outcome& o);

std::string to_text(const nlohmann::json& j);  // compact; invalid UTF-8 replaced
std::string sse_event(const nlohmann::json& j);  // "data: {...}\n\n"
inline const char* kSseDone = "data: [DONE]\n\n";

}  // namespace sluice::server
