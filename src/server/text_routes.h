// The text utilities next to generation (llama-server's names and shapes):
// POST /tokenize {"content", "add_special"?, "with_pieces"?} -> {"tokens"},
// POST /detokenize {"tokens"} -> {"content"}, and POST /apply-template (a chat
// request's messages, tools, reasoning_effort) -> {"prompt", "tokens"}: exactly
// what /v1/chat/completions would feed the model. Bad input is a 400 naming the field.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_codec.h"
#include "server/api_request.h"

namespace sluice::server {

nlohmann::json tokenize_reply(const chat::ChatCodec& codec, const nlohmann::json& body);
nlohmann::json detokenize_reply(const chat::ChatCodec& codec, const nlohmann::json& body, int64_t vocab);
// `model_name` stands in for a missing "model" field. {"prompt": text, "tokens": count, "ids": the token ids}.
nlohmann::json apply_template_reply(const chat::ChatCodec& codec, nlohmann::json body, const RequestLimits& limits,
                                    const std::string& model_name);

}  // namespace sluice::server
