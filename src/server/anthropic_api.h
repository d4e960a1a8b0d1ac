// The Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) on the
// same generation path: a body becomes the internal GenerationRequest (OpenAI-shaped
// messages: system, user text, assistant text / thinking / tool_use as
// reasoning_content and tool_calls, tool_result blocks as tool messages), and
// its reply is written as a Message or as message_start, content_block_start /
// delta (text_delta, thinking_delta, input_json_delta) / stop, message_delta,
// message_stop and ping events. Errors use Anthropic's shape
// {"type": "error", "error": {"type", "message"}}; the message names the field.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_codec.h"
#include "server/error_body.h"
#include "server/reply_writer.h"
#include "server/api_request.h"

namespace sluice::server {

// stop_sequences, temperature, top_p, top_k, metadata, stream, tools (input_schema),
// tool_choice auto / any / tool / none (+ disable_parallel_tool_use), thinking
// enabled / disabled (as reasoning_effort max / none). count_tokens: only the fields that shape the prompt.
// Fields of the current reference that concern provider features are ignored and
// listed in `notes`; server tools are left out and named there.
chat::GenerationRequest parse_anthropic_request(const nlohmann::json& body, const RequestLimits& limits, bool count_tokens = false,
                                      RequestNotes* notes = nullptr);

nlohmann::json anthropic_error_body(const chat::ApiError& e);

std::unique_ptr<ReplyWriter> make_anthropic_writer(const chat::GenerationRequest& req, std::string id, std::string model,
                                                   int64_t prompt_tokens);

}  // namespace sluice::server
