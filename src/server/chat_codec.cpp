#include "server/chat_codec.h"

#include <filesystem>

#include "model/model.h"
#include "server/api_error.h"
#include "server/text_codec.h"
#include "util/error.h"

namespace sluice::server {

namespace {

// Length of a valid UTF-8 sequence starting at s[i] (0 if invalid, -1 if cut short).
int utf8_seq(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  int n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
  else return 0;
  for (int k = 1; k < n; ++k) {
    if (i + size_t(k) >= s.size()) return -1;
    const auto d = static_cast<unsigned char>(s[i + size_t(k)]);
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
    // Reject overlongs, surrogates and > U+10FFFF as early as the second byte allows.
    if (k == 1) {
      if (n == 3 && c == 0xE0 && d < 0xA0) return 0;
      if (n == 3 && c == 0xED && d > 0x9F) return 0;
      if (n == 4 && c == 0xF0 && d < 0x90) return 0;
      if (n == 4 && c == 0xF4 && d > 0x8F) return 0;
    }
  }
  return n;
}

const char* kReplacement = "\xEF\xBF\xBD";

}  // namespace

std::string Utf8Assembler::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const int n = utf8_seq(pending_, i);
    if (n < 0) break;  // wait for the rest
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else {
      out.append(pending_, i, size_t(n));
      i += size_t(n);
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8Assembler::flush() {
  std::string out = pending_.empty() ? "" : kReplacement;
  pending_.clear();
  return out;
}

std::string sanitize_utf8(std::string_view s) {
  Utf8Assembler a;
  std::string out = a.push(s);
  return out + a.flush();
}

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
  Utf8Assembler utf8_;
};

}  // namespace

ByteCodec::ByteCodec(int64_t vocab) : vocab_(vocab) {
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

std::unique_ptr<ChatCodec> make_chat_codec(const std::string& model_dir, const ModelInfo& info) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(model_dir) / "tokenizer.json") || fs::exists(fs::path(model_dir) / "tiktoken.model"))
    return std::make_unique<TextChatCodec>(model_dir, info.vocab);
  return std::make_unique<ByteCodec>(info.vocab);
}

}  // namespace sluice::server
