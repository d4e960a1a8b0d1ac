// OpenAI request bodies -> validated generation requests (chat::GenerationRequest). Every field is
// either honoured or refused with a 400 that names it; unknown fields are refused.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/generation_request.h"
#include "runtime/sampler.h"

namespace sluice::server {

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

// What a request asked for that this server leaves aside: fields that only concern
// a provider feature it does not have (ignored, counted in /metrics by name), and
// hosted tools it cannot run (not shown to the model; named in the reply's headers).
struct RequestNotes {
  std::vector<std::string> ignored;        // field names from a fixed list (metric labels)
  std::vector<std::string> dropped_tools;  // the tools' names or types
  // A server-side context edit (Anthropic context_management) that only acts once the
  // prompt reaches this many tokens: a longer prompt is refused (0: none).
  int64_t edit_trigger = 0;
  std::string edit_name;
  void ignore(const std::string& field) {
    if (std::find(ignored.begin(), ignored.end(), field) == ignored.end()) ignored.push_back(field);
  }
};

// Parses a body; 400 for malformed JSON, a non-object, or nesting deeper than 64.
nlohmann::json parse_json_body(std::string_view body);

chat::GenerationRequest parse_chat_request(const nlohmann::json& body, const RequestLimits& limits, RequestNotes* notes = nullptr);
chat::GenerationRequest parse_completion_request(const nlohmann::json& body, const RequestLimits& limits);

}  // namespace sluice::server
