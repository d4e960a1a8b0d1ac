#include "server/text_routes.h"

#include <algorithm>

#include "server/error_body.h"
#include "text/utf8.h"

namespace sluice::server {

using chat::ChatCodec;
using chat::ChatOptions;
using chat::GenerationRequest;
using chat::bad_field;

using nlohmann::json;

namespace {

void only(const json& body, std::initializer_list<const char*> known) {
  for (const auto& item : body.items()) {
    const std::string& k = item.key();
    if (std::none_of(known.begin(), known.end(), [&](const char* n) { return k == n; }))
      bad_field(k, "unknown field '{}'", k);
  }
}

bool flag(const json& body, const char* key) {
  if (!body.contains(key) || body[key].is_null()) return false;
  if (!body[key].is_boolean()) bad_field(key, "'{}' must be a boolean", key);
  return body[key].get<bool>();
}

std::string text_of(const ChatCodec& codec, const std::vector<int32_t>& ids) {
  auto d = codec.detokenizer();
  std::string s;
  for (int32_t id : ids) s += d->push(id);
  return s + d->flush();
}

}  // namespace

json tokenize_reply(const ChatCodec& codec, const json& body) {
  only(body, {"content", "add_special", "with_pieces"});
  if (!body.contains("content") || !body["content"].is_string())
    bad_field("content", "'content' is required and must be a string");
  const auto ids = codec.encode(body["content"].get<std::string>(), flag(body, "add_special"));
  if (!flag(body, "with_pieces")) return {{"tokens", ids}};
  json tokens = json::array();
  for (int32_t id : ids) tokens.push_back({{"id", id}, {"piece", text::utf8_sanitize(codec.token_bytes(id))}});
  return {{"tokens", tokens}};
}

json detokenize_reply(const ChatCodec& codec, const json& body, int64_t vocab) {
  only(body, {"tokens"});
  if (!body.contains("tokens") || !body["tokens"].is_array()) bad_field("tokens", "'tokens' must be an array of ids");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < body["tokens"].size(); ++i) {
    const json& t = body["tokens"][i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
      bad_field(fmt::format("tokens[{}]", i), "'tokens[{}]' must be a token id below {}, got {}", i, vocab, t.dump());
    ids.push_back(t.get<int32_t>());
  }
  return {{"content", text_of(codec, ids)}};
}

json apply_template_reply(const ChatCodec& codec, json body, const RequestLimits& limits, const std::string& model_name) {
  if (!body.contains("model")) body["model"] = model_name;
  const GenerationRequest r = parse_chat_request(body, limits);
  const auto ids = codec.render_chat(r.messages, r.tools, ChatOptions{r.reasoning_effort});
  return {{"prompt", text_of(codec, ids)}, {"tokens", ids.size()}, {"ids", ids}};
}

}  // namespace sluice::server
