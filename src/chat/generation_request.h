// One generation request, whichever API it came in through: the conversation
// (or completion prompt), sampling, stop rules and the structure the reply
// must keep. The server's parsers fill it in (server/api_request.h, the Anthropic
// and Responses parsers); `sluice chat` fills it in directly.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/grammar.h"
#include "runtime/sampler.h"

namespace sluice::chat {

struct GenerationRequest {
  enum class Kind { Chat, Completion };
  Kind kind = Kind::Chat;
  std::string model;

  // Chat: messages with every content flattened to a string (or null for an
  // assistant turn that only calls tools); tools as sent, null when absent or tool_choice "none".
  nlohmann::json messages = nlohmann::json::array();
  nlohmann::json tools;
  bool parallel_tool_calls = true;
  // Freeform tools (input is text): declared in `tools` as functions with one string
  // parameter, `input`; the writers return their calls as that text (server/freeform_tools.h).
  std::set<std::string> freeform_tools;
  // Tools marked strict: a forced call's arguments must match their whole schema (value
  // checks too); other tools' forced calls keep the schema's shape (chat/output_grammar.h).
  std::set<std::string> strict_tools;
  std::string reasoning_effort;  // "" (the model's default), none, low, medium, high or max
  bool reasoning_hidden = false;  // the client asked not to be shown the reasoning (Anthropic's display "omitted")

  // Completions: the prompt as text, or as token ids.
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  bool echo = false;

  std::optional<int64_t> max_tokens;  // absent: up to the context length
  SamplingParams sampling;
  std::map<int32_t, float> logit_bias;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;  // completions: logprobs >= 0 given
  int top_logprobs = 0;
  bool json_object = false;  // response_format {"type": "json_object"}
  // tool_choice "required" or a named function: the reply must be a call (of that function).
  enum class ToolChoice { Auto, Required, Named };
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string tool_choice_name;
  // The grammar every token must keep the reply within: response_format json_object
  // or json_schema (set by the parser), or the forced call (set once the prompt is rendered).
  std::shared_ptr<const Grammar> grammar;
  // Positions of the rendered prompt at message boundaries other conversations
  // may share (the end of the system prompt and tools: chat/prompt_boundaries.h),
  // where the prompt cache keeps a checkpoint. Set once the prompt is rendered.
  std::vector<int64_t> prompt_boundaries;
};

}  // namespace sluice::chat
