#include "server/text_codec.h"

#include <filesystem>
#include <fstream>

#include "server/api_error.h"
#include "util/error.h"

namespace sluice::server {

namespace {

class TextDetokenizer : public Detokenizer {
 public:
  explicit TextDetokenizer(const text::Tokenizer& tok) : tok_(tok), dec_(tok) {}
  std::string push(int32_t id) override { return tok_.valid_id(id) ? dec_.push(id) : std::string(); }
  std::string flush() override { return dec_.flush(); }

 private:
  const text::Tokenizer& tok_;
  text::IncrementalDecoder dec_;
};

}  // namespace

TextChatCodec::TextChatCodec(const std::string& model_dir, int64_t model_vocab) {
  tok_ = text::Tokenizer::load(model_dir);
  if (tok_->vocab_size() > model_vocab)
    fail("{}: the tokenizer has {} ids but the model only {}", model_dir, tok_->vocab_size(), model_vocab);
  namespace fs = std::filesystem;
  const bool has_template = fs::exists(model_dir + "/chat_template.jinja") || [&] {
    std::ifstream in(model_dir + "/tokenizer_config.json");
    if (!in) return false;
    auto cfg = nlohmann::json::parse(in, nullptr, false);
    if (cfg.is_object()) add_bos_ = cfg.value("add_bos_token", false);
    return cfg.is_object() && cfg.contains("chat_template") && !cfg["chat_template"].is_null();
  }();
  if (has_template) tmpl_.emplace(text::ChatTemplate::load(model_dir));
  if (tmpl_) {
    const std::string& src = tmpl_->source();
    if (src.find("<｜tool▁calls▁begin｜>") != std::string::npos) family_ = "deepseek_v3";
    else if (src.find("<|tool_calls_section_begin|>") != std::string::npos) family_ = "kimi_k2";
    else if (src.find("<tool_call>") != std::string::npos) family_ = "qwen3";
    template_renders_tools_ = src.find("tools") != std::string::npos;
  }
  if (auto e = tok_->eos_id()) stop_ids_.push_back(*e);
  for (const char* marker : {"<|im_end|>", "<|eot_id|>", "<|return|>"})
    if (auto id = tok_->token_id(marker); id && tok_->is_special(*id)) stop_ids_.push_back(*id);
}

std::string TextChatCodec::describe() const {
  return fmt::format("{} tokenizer, {} ids, {}", tok_->kind(), tok_->vocab_size(),
                     tmpl_ ? "chat template" + (family_.empty() ? std::string() : ", " + family_ + " tool calls")
                           : std::string("no chat template"));
}

std::vector<int32_t> TextChatCodec::render_chat(const nlohmann::json& messages, const nlohmann::json& tools) const {
  if (!tmpl_)
    throw ApiError(400, "invalid_request_error", "messages", "",
                   "this model has no chat template: use /v1/completions");
  nlohmann::json msgs = messages;
  const bool has_tools = tools.is_array() && !tools.empty();
  if (has_tools && family_.empty())
    throw ApiError(400, "invalid_request_error", "tools", "",
                   "this model's chat template has no tool-call syntax this server can parse");
  if (has_tools && !template_renders_tools_) {
    // The template (DeepSeek-V3's, for one) has no place for tool definitions: they go
    // into a system message, with the call syntax the model was trained on.
    std::string sys = "## Tools\nYou can call these functions:\n" + tools.dump() +
                      "\nTo call a function, reply with <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
                      "NAME\n```json\nARGUMENTS\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    if (!msgs.empty() && msgs[0]["role"] == "system" && msgs[0]["content"].is_string())
      msgs[0]["content"] = msgs[0]["content"].get<std::string>() + "\n\n" + sys;
    else
      msgs.insert(msgs.begin(), nlohmann::json{{"role", "system"}, {"content", sys}});
  }
  std::string rendered;
  try {
    rendered = tmpl_->render(msgs, has_tools ? tools : nlohmann::json(), true);
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request_error", "messages", "",
                   fmt::format("the model's chat template cannot render this conversation: {}", e.what()));
  }
  return tok_->encode(rendered);
}

std::vector<int32_t> TextChatCodec::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  if (add_bos_)
    if (auto b = tok_->bos_id()) ids.push_back(*b);
  auto body = tok_->encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::unique_ptr<Detokenizer> TextChatCodec::detokenizer() const { return std::make_unique<TextDetokenizer>(*tok_); }

std::string TextChatCodec::token_bytes(int32_t id) const {
  return tok_->valid_id(id) ? std::string(tok_->token_bytes(id)) : std::string();
}

ReplySyntax TextChatCodec::reply_syntax(const std::vector<int32_t>& prompt) const {
  ReplySyntax s;
  if (family_ == "deepseek_v3") s = deepseek_v3_syntax();
  else if (family_ == "kimi_k2") s = kimi_k2_syntax();
  else if (family_ == "qwen3") s = qwen3_syntax();
  // A generation prompt that ends inside an opened <think> block.
  std::string tail;
  for (size_t i = prompt.size() > 4 ? prompt.size() - 4 : 0; i < prompt.size(); ++i) tail += token_bytes(prompt[i]);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  s.starts_in_reasoning = tail.size() >= 7 && tail.compare(tail.size() - 7, 7, "<think>") == 0;
  return s;
}

}  // namespace sluice::server
