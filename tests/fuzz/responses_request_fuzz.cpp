// Fuzz target: /v1/responses request bodies (with one held response, so
// previous_response_id is reached): a body is either a valid request, whose
// Response object and stream events the writer then produces as valid JSON,
// or an ApiError naming a 4xx status, never a crash or another exception.
#include <cstdint>
#include <string>

#include "chat/api_error.h"
#include "server/api_request.h"
#include "server/responses_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nlohmann::json;
  static sluice::server::ResponseStore store;
  static const bool seeded = [] {
    store.put("resp_seed", {json{{"id", "resp_seed"}},
                            json::array({json{{"role", "user"}, {"content", "hi"}},
                                         json{{"role", "assistant"}, {"content", "hello"}}})});
    return true;
  }();
  (void)seeded;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  sluice::server::RequestLimits limits;
  limits.vocab = 1000;
  limits.default_seed = 7;
  try {
    const json j = sluice::server::parse_json_body(body);
    const auto rr = sluice::server::parse_responses_request(j, limits, &store);
    if (rr.req.messages.empty() || rr.conversation.empty()) __builtin_trap();
    for (const auto& m : rr.req.messages)
      if (!m.contains("role") || !m["role"].is_string()) __builtin_trap();
    if (rr.req.max_tokens && *rr.req.max_tokens <= 0) __builtin_trap();
    auto w = sluice::server::make_responses_writer(rr, {"resp_f", "m", 1, 2}, nullptr);
    std::string out = w->begin();
    sluice::chat::ReplyDelta d;
    d.reasoning = "r";
    d.content = "c";
    d.tool_calls.push_back({"call_f", "f", "{}"});
    out += w->delta(d, {});
    sluice::chat::Outcome o;
    o.finish_reason = "stop";
    out += w->end(o);
    if (!rr.req.stream) {
      if (!json::accept(out)) __builtin_trap();
    } else {
      for (size_t at = 0; (at = out.find("data: ", at)) != std::string::npos;) {
        const size_t end = out.find("\n\n", at);
        if (end == std::string::npos || !json::accept(out.substr(at + 6, end - at - 6))) __builtin_trap();
        at = end;
      }
    }
  } catch (const sluice::chat::ApiError& e) {
    if (e.status() < 400 || e.status() > 499) __builtin_trap();
  }
  return 0;
}
