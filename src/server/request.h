// OpenAI request bodies -> validated generation requests. Every field is
// either honoured or refused with a 400 that names it; unknown fields are refused.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/sampler.h"
#include "server/grammar.h"

namespace sluice::server {

struct Request {
  enum class Kind { Chat, Completion };
  Kind kind = Kind::Chat;
  std::string model;

  // Chat: messages with every content flattened to a string (or null for an
  // assistant turn that only calls tools); tools as sent, null when absent or tool_choice "none".
  nlohmann::json messages = nlohmann::json::array();
  nlohmann::json tools;
  bool parallel_tool_calls = true;
  std::string reasoning_effort;  // "" (the model's default), none, low, medium, high or max

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
};

struct RequestLimits {
  int64_t vocab = 0;          // token ids and logit_bias keys must be below this
  uint64_t default_seed = 0;  // used when the request has no seed
  SamplingParams defaults;    // what a request that does not say gets (sampling_defaults())
};

// The server's sampling defaults for a model directory, after transformers'
// reading of generation_config.json: no file: OpenAI's (temperature 1, no
// top-p/top-k limit); do_sample absent or false: greedy; do_sample true:
// temperature (1), top_p (1), top_k (50) and min_p (0) as the file gives them,
// transformers' defaults in brackets. A request's own fields override each.
SamplingParams sampling_defaults(const std::string& model_dir);

// Parses a body; 400 for malformed JSON, a non-object, or nesting deeper than 64.
nlohmann::json parse_json_body(std::string_view body);

Request parse_chat_request(const nlohmann::json& body, const RequestLimits& limits);
Request parse_completion_request(const nlohmann::json& body, const RequestLimits& limits);

}  // namespace sluice::server
