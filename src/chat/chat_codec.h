// What the conversation layer needs from a model's text side, behind one small interface:
// conversation -> token ids, token ids -> text (incrementally, for streaming),
// and the family's reply syntax (reasoning and tool calls).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/reply_parser.h"

namespace sluice::chat {

// Turns generated ids into text piece by piece; never returns a partial UTF-8
// character (it waits for the rest) and replaces invalid bytes with U+FFFD.
class Detokenizer {
 public:
  virtual ~Detokenizer() = default;
  virtual std::string push(int32_t id) = 0;
  virtual std::string flush() = 0;
};

// Per-request rendering choices.
struct ChatOptions {
  // "" (the model's default), "none" (no reasoning) or low / medium / high / max.
  // K3 renders it as its thinking-effort message (none: thinking off); a Jinja
  // template sees it as the variable `reasoning_effort`, and "none" also as
  // `enable_thinking` = false (the switch of Qwen3-style templates).
  std::string reasoning_effort;
};

class ChatCodec {
 public:
  virtual ~ChatCodec() = default;
  virtual std::string describe() const = 0;  // for the startup line
  // messages: normalised OpenAI messages (string or null contents); tools: array or null.
  // Renders with the generation prompt and tokenises. Throws ApiError(400) for a
  // conversation the template cannot render.
  virtual std::vector<int32_t> render_chat(const nlohmann::json& messages, const nlohmann::json& tools,
                                           const ChatOptions& opts = {}) const = 0;
  // Plain text for /v1/completions (with add_bos, BOS where the model expects one).
  virtual std::vector<int32_t> encode(const std::string& text, bool add_bos = true) const = 0;
  virtual std::unique_ptr<Detokenizer> detokenizer() const = 0;
  // The raw bytes of one token (for logprobs), special tokens as their text.
  virtual std::string token_bytes(int32_t id) const = 0;
  // End-of-turn ids besides the model's eos ids (e.g. <|im_end|>).
  virtual std::vector<int32_t> stop_ids() const = 0;
  // Whether the id is a marker the template writes (an added or special token: a turn or
  // tool-call marker), never text of a message. The byte codec has none.
  virtual bool is_marker(int32_t /*id*/) const { return false; }
  // The family's reply syntax, given the rendered prompt's ids (which may open a <think> block).
  virtual ReplySyntax reply_syntax(const std::vector<int32_t>& prompt) const = 0;
};

// A byte-level codec for synthetic models without tokenizer files: ids 0-255
// are bytes; the conversation is written ChatML-style as plain bytes and tool
// calls use Qwen3's <tool_call> syntax.
class ByteCodec : public ChatCodec {
 public:
  explicit ByteCodec(int64_t vocab);  // checks the model has the 256 byte ids
  std::string describe() const override { return "byte-level codec (no tokenizer files)"; }
  std::vector<int32_t> render_chat(const nlohmann::json& messages, const nlohmann::json& tools,
                                   const ChatOptions& opts = {}) const override;
  std::vector<int32_t> encode(const std::string& text, bool add_bos = true) const override;
  std::unique_ptr<Detokenizer> detokenizer() const override;
  std::string token_bytes(int32_t id) const override;
  std::vector<int32_t> stop_ids() const override { return {}; }
  ReplySyntax reply_syntax(const std::vector<int32_t>& prompt) const override;
};

// The codec for a model directory: its tokenizer and chat template when it has
// them, else the byte codec (only for vocabularies of at least 256 ids).
// model_vocab: the model's output size (ModelInfo::vocab).
std::unique_ptr<ChatCodec> make_chat_codec(const std::string& model_dir, int64_t model_vocab);

}  // namespace sluice::chat
