// The chat page `sluice serve` answers GET / with: one HTML document embedded
// in the binary at build time (server/chat_page.html; CMake writes it into a
// generated source), with the model card filled in. It talks to the server's
// own /v1/chat/completions and /v1/models and fetches nothing else.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_codec.h"
#include "model/model.h"
#include "server/http_server.h"

namespace sluice::server {

// The page with `card` (JSON) in its model-card slot.
std::string chat_page(const nlohmann::json& card);

// The card of the served model: its id, architecture, chat format, context,
// the sampling defaults and what opts.page_card adds (the memory plan). With
// --api-key only that a key is needed: the page is served without one.
nlohmann::json chat_page_card(const Model& model, const chat::ChatCodec& codec, const ServerOptions& opts);

}  // namespace sluice::server
