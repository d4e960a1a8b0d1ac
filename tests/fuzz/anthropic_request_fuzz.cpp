// Fuzz target: /v1/messages and /v1/messages/count_tokens request bodies (the
// first byte picks which): a body is either a valid request or an ApiError
// naming a 4xx status, never a crash or another exception.
#include <cstdint>
#include <string>

#include "chat/api_error.h"
#include "server/anthropic_api.h"
#include "server/api_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool count_tokens = data[0] & 1;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  sluice::server::RequestLimits limits;
  limits.vocab = 1000;
  limits.default_seed = 7;
  try {
    const nlohmann::json j = sluice::server::parse_json_body(body);
    const auto r = sluice::server::parse_anthropic_request(j, limits, count_tokens);
    if (r.messages.empty()) __builtin_trap();
    for (const auto& m : r.messages)
      if (!m.contains("role") || !m["role"].is_string()) __builtin_trap();
    if (r.max_tokens && *r.max_tokens <= 0) __builtin_trap();
    (void)sluice::server::anthropic_error_body(sluice::chat::ApiError(400, "invalid_request_error", "x", "", "y"));
  } catch (const sluice::chat::ApiError& e) {
    if (e.status() < 400 || e.status() > 499) __builtin_trap();
  }
  return 0;
}
