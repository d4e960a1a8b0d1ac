// OpenAI response bodies and server-sent-event chunks for chat completions and
// completions, built from the generator's output.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/chat_codec.h"
#include "server/reply_stream.h"

namespace sluice::server {

struct ResponseMeta {
  std::string id;  // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;
  std::string model;
};

std::string new_response_id(const char* prefix);  // prefix + 24 random alphanumerics

nlohmann::json usage_json(const Outcome& o);
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls, size_t first_index, bool for_delta);

// Chat logprobs: {"content": [{token, logprob, bytes, top_logprobs: [...]}, ...]}.
nlohmann::json chat_logprobs_json(const std::vector<LogprobEntry>& entries, const ChatCodec& codec);
// Completions logprobs: {tokens, token_logprobs, top_logprobs, text_offset}; offsets start at `offset`.
nlohmann::json completion_logprobs_json(const std::vector<LogprobEntry>& entries, const ChatCodec& codec,
                                        size_t offset);

// Accumulates a whole reply for a non-streamed response.
struct ReplyAccumulator {
  ReplyDelta reply;
  std::vector<LogprobEntry> logprobs;
  void add(const ReplyDelta& d, const std::vector<LogprobEntry>& lp);
};

nlohmann::json chat_completion_json(const ResponseMeta& m, const ReplyAccumulator& acc, const Outcome& o,
                                    bool logprobs, const ChatCodec& codec);
nlohmann::json completion_json(const ResponseMeta& m, const std::string& text, const ReplyAccumulator& acc,
                               const Outcome& o, bool logprobs, const ChatCodec& codec, size_t echo_bytes);

// One streamed chat chunk carrying `delta` (an object) and optionally finish_reason / logprobs.
nlohmann::json chat_chunk_json(const ResponseMeta& m, nlohmann::json delta, const nlohmann::json& finish_reason,
                               const nlohmann::json& logprobs, bool include_usage);
nlohmann::json completion_chunk_json(const ResponseMeta& m, const std::string& text, const nlohmann::json& finish_reason,
                                     const nlohmann::json& logprobs, bool include_usage);
// The last chunk when stream_options.include_usage: no choices, usage set.
nlohmann::json usage_chunk_json(const ResponseMeta& m, const char* object, const Outcome& o);

std::string to_text(const nlohmann::json& j);  // compact; invalid UTF-8 replaced
std::string sse_event(const nlohmann::json& j);  // "data: {...}\n\n"
inline const char* kSseDone = "data: [DONE]\n\n";

}  // namespace sluice::server
