#include "chat/chat_codec.h"

#include <filesystem>

#include "chat/api_error.h"
#include "chat/text_codec.h"
#include "text/utf8.h"
#include "util/error.h"

namespace sluice::chat {

namespace {

class ByteDetokenizer : public Detokenizer {
 public:
  std::string push(int32_t id) override {
    if (id < 0 || id > 255) return {};
    const char c = char(id);
    return utf8_.push(std::string_view(&c, 1));
  }
  std::string flush() override { return utf8_.flush(); }

 private:
  text::Utf8Assembler utf8_;
};

}  // namespace

ByteCodec::ByteCodec(int64_t vocab) {
  if (vocab < 256) fail("the byte-level codec needs a vocabulary of at least 256 ids, the model has {}", vocab);
}

std::vector<int32_t> ByteCodec::encode(const std::string& text, bool) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(int32_t(c));
  return ids;
}

std::vector<int32_t> ByteCodec::render_chat(const nlohmann::json& messages, const nlohmann::json& tools,
                                            const ChatOptions&) const {
  std::string s;
  if (tools.is_array() && !tools.empty())
    s += "<|im_start|>system\n# Tools\n<tools>\n" + tools.dump() +
         "\n</tools>\nCall a tool as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call><|im_end|>\n";
  for (const auto& m : messages) {
    s += "<|im_start|>" + m["role"].get<std::string>() + "\n";
    if (m["content"].is_string()) s += m["content"].get<std::string>();
    if (m.contains("tool_calls"))
      for (const auto& c : m["tool_calls"])
        s += "<tool_call>{\"name\": " + nlohmann::json(c["function"]["name"]).dump() +
             ", \"arguments\": " + c["function"]["arguments"].get<std::string>() + "}</tool_call>";
    s += "<|im_end|>\n";
  }
  s += "<|im_start|>assistant\n";
  return encode(s);
}

std::unique_ptr<Detokenizer> ByteCodec::detokenizer() const { return std::make_unique<ByteDetokenizer>(); }

std::string ByteCodec::token_bytes(int32_t id) const {
  if (id >= 0 && id < 256) return std::string(1, char(id));
  return {};
}

ReplySyntax ByteCodec::reply_syntax(const std::vector<int32_t>&) const { return qwen3_syntax(); }

std::unique_ptr<ChatCodec> make_chat_codec(const std::string& model_dir, int64_t model_vocab) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(model_dir) / "tokenizer.json") || fs::exists(fs::path(model_dir) / "tiktoken.model"))
    return std::make_unique<TextChatCodec>(model_dir, model_vocab);
  return std::make_unique<ByteCodec>(model_vocab);
}

}  // namespace sluice::chat
