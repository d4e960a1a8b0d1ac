// The ChatCodec of a real checkpoint: its tokenizer (tokenizer.json or
// tiktoken.model) and its Jinja chat template, with the reply syntax picked
// from the markers the template uses; Kimi K3 checkpoints (a tokenizer with
// the XTML markers as special tokens) are rendered by text/xtml instead.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>

#include "chat/chat_codec.h"
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

  const std::string& family() const { return family_; }

 private:
  std::unique_ptr<text::Tokenizer> tok_;
  std::optional<text::ChatTemplate> tmpl_;
  std::vector<int32_t> render_xtml(const nlohmann::json& messages, const nlohmann::json& tools,
                                   const ChatOptions& opts) const;
  // "deepseek_v3", "kimi_k2", "qwen3", "kimi_k3" (XTML, rendered natively) or "" (the template has no
  // tool-call syntax: calls are declared and written as Qwen3-style text)
  std::string family_;
  bool template_renders_tools_ = false;
  bool add_bos_ = false;
  std::vector<int32_t> stop_ids_;
  std::unordered_set<int32_t> added_ids_;  // the tokenizer's added tokens
};

}  // namespace sluice::chat
