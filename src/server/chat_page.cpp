#include "server/chat_page.h"

#include <string_view>

#include "util/error.h"

namespace sluice::server {

// Written by CMake from server/chat_page.html (cmake/embed_text.cmake).
extern const char kChatPageHtml[];

namespace {
constexpr std::string_view kCardSlot = "/*SLUICE_MODEL_CARD*/";
}  // namespace

std::string chat_page(const nlohmann::json& card) {
  std::string page = kChatPageHtml;
  const size_t at = page.find(kCardSlot);
  if (at == std::string::npos) fail("internal: the chat page has no model card slot");
  // Inside <script>, "</script>" or "<!--" in a string would end or change the
  // element: '<' only occurs inside JSON strings, where \u003c means the same.
  std::string json;
  for (const char c : card.dump()) {
    if (c == '<') json += "\\u003c";
    else json += c;
  }
  page.replace(at, kCardSlot.size(), json);
  return page;
}

nlohmann::json chat_page_card(const Model& model, const chat::ChatCodec& codec, const ServerOptions& opts) {
  if (!opts.api_key.empty()) return {{"api_key_required", true}};
  nlohmann::json card = opts.page_card.is_object() ? opts.page_card : nlohmann::json::object();
  const SamplingParams& d = opts.sampling_defaults;
  card["model"] = opts.model_name;
  card["model_type"] = model.info().arch;
  card["vocab"] = model.info().vocab;
  card["chat_format"] = codec.describe();
  card["context_length"] = opts.context_length;
  card["parallel"] = opts.parallel;
  card["speculation"] = opts.drafter ? "on (same replies, fewer passes)" : "off";
  card["sampling_defaults"] = {{"temperature", d.temperature}, {"top_p", d.top_p}, {"top_k", d.top_k}, {"min_p", d.min_p}};
  return card;
}

}  // namespace sluice::server
