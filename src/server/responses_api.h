// The OpenAI Responses API (POST /v1/responses) on the same generation path.
// A body becomes the equivalent chat request (instructions as the system
// message; input as a string or items: messages, function_call,
// function_call_output and reasoning items; function tools; tool_choice;
// text.format; reasoning.effort; max_output_tokens) and goes through
// server/api_request.h's chat parser, so every field is checked exactly as there
// and an error names the Responses field. previous_response_id continues a
// response the server still holds (server/response_store.h). The reply is a
// Response object, or the stream of response.created, response.in_progress,
// response.output_item.added / .done, response.content_part.added / .done,
// response.output_text.delta / .done, response.reasoning_text.delta / .done,
// response.function_call_arguments.delta / .done and response.completed (or
// response.incomplete when max_output_tokens cut it short) events. Errors use
// the OpenAI error shape {"error": {message, type, param, code}}.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/generation_request.h"
#include "server/reply_writer.h"
#include "server/api_request.h"
#include "server/response_store.h"

namespace sluice::server {

struct ResponsesRequest {
  chat::GenerationRequest req;
  // The conversation as chat messages without the instructions (stored for a follow-up).
  nlohmann::json conversation = nlohmann::json::array();
  // Request fields the Response object repeats (instructions, tools, tool_choice, text,
  // reasoning, metadata, max_output_tokens, previous_response_id, store, user...).
  nlohmann::json echo = nlohmann::json::object();
  bool store = true;
  // Namespace groups: their functions are declared as "NAMESPACE.NAME" and called back with `namespace`.
  std::set<std::string> namespaces;
  std::string dropped_tools;  // hosted tools left out (also in `notes`), named in the response's metadata
};

// `store`: where previous_response_id is looked up (null: none is held).
// Ignored fields and hosted tools left out go to `notes`.
ResponsesRequest parse_responses_request(const nlohmann::json& body, const RequestLimits& limits,
                                         const ResponseStore* store, RequestNotes* notes = nullptr);

struct ResponsesReplyInfo {
  std::string id, model;
  int64_t created_at = 0;
  int64_t prompt_tokens = 0;
};
// `on_done` hears the finished Response object and the conversation it ended
// (the request's plus the reply as an assistant message), when the request asked to store it.
using StoreFn = std::function<void(const std::string& id, ResponseStore::Entry entry)>;
std::unique_ptr<ReplyWriter> make_responses_writer(const ResponsesRequest& rr, ResponsesReplyInfo info,
                                                   StoreFn on_done);

}  // namespace sluice::server
