// The ChatCodec of a real checkpoint: its tokenizer (tokenizer.json or
// tiktoken.model) and its Jinja chat template, with the chat syntax
// (chat/chat_syntax.h) picked from the markers the template uses; a syntax
// with a native format (Kimi K3's XTML: a tokenizer with its markers as special
// tokens) renders the conversation itself instead.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>

#include "chat/chat_codec.h"
#include "chat/chat_syntax.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace sluice::chat {

class TextChatCodec : public ChatCodec {
 public:
  // model_vocab: the model's output size; ids beyond the tokenizer's decode to nothing.
  TextChatCodec(const std::string& model_dir, int64_t model_vocab);
  std::string describe() const override;
  std::vector<int32_t> render_chat(const nlohmann::json& messages, const nlohmann::json& tools,
                                   const ChatOptions& opts = {}) const override;
  std::vector<int32_t> encode(const std::string& text, bool add_bos = true) const override;
  std::unique_ptr<Detokenizer> detokenizer() const override;
  std::string token_bytes(int32_t id) const override;
  std::vector<int32_t> stop_ids() const override { return stop_ids_; }
  bool is_marker(int32_t id) const override;
  ReplySyntax reply_syntax(const std::vector<int32_t>& prompt) const override;

  // The chat syntax's name ("deepseek_v3", "kimi_k2", "qwen3", "gpt_oss", "kimi_k3"), or "" when the
  // template has no tool-call syntax (calls are then declared and written as Qwen3-style text).
  std::string family() const { return syntax_ ? std::string(syntax_->name) : std::string(); }

 private:
  std::unique_ptr<text::Tokenizer> tok_;
  std::optional<text::ChatTemplate> tmpl_;
  // The template rendered with this conversation; ApiError(400) when it cannot be.
  std::string render_template(const nlohmann::json& msgs, const nlohmann::json& tools, const ChatOptions& opts) const;
  // The ids of the rendered conversation, with client text that spells a marker kept as text.
  std::vector<int32_t> encode_rendered(const nlohmann::json& msgs, const nlohmann::json& tools,
                                       const ChatOptions& opts) const;
  bool spells_marker(const std::string& s) const;  // contains an added token's text
  const ChatSyntax* syntax_ = nullptr;  // nullptr: the template has none
  bool template_renders_tools_ = false;
  bool add_bos_ = false;
  std::vector<int32_t> stop_ids_;
  std::unordered_set<int32_t> added_ids_;  // the tokenizer's added tokens
};

}  // namespace sluice::chat
