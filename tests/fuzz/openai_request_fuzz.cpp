// Fuzz target: request bodies of /v1/chat/completions and /v1/completions (the
// first byte picks the endpoint): a body is either a valid request or an
// ApiError naming a status and a field, never a crash or another exception.
#include <cstdint>
#include <string>

#include "chat/api_error.h"
#include "server/api_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  sluice::server::RequestLimits limits;
  limits.vocab = 1000;
  limits.default_seed = 7;
  try {
    const nlohmann::json j = sluice::server::parse_json_body(body);
    const auto r = chat ? sluice::server::parse_chat_request(j, limits) : sluice::server::parse_completion_request(j, limits);
    for (int32_t id : r.prompt_ids)
      if (id < 0 || id >= limits.vocab) __builtin_trap();  // ids are checked against the vocabulary
    for (const auto& [id, bias] : r.logit_bias)
      if (id < 0 || id >= limits.vocab || !(bias >= -100 && bias <= 100)) __builtin_trap();
    // max_tokens is positive, except 0 for prompt scoring (a completion with echo).
    if (r.max_tokens && *r.max_tokens <= 0 && !(*r.max_tokens == 0 && !chat && r.echo)) __builtin_trap();
  } catch (const sluice::chat::ApiError& e) {
    if (e.status() < 400 || e.status() > 499) __builtin_trap();
  }
  return 0;
}
