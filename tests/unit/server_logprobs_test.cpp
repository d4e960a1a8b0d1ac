// Log-probabilities in completions responses: every token keeps its own
// top_logprobs key, also a token that is only a piece of a UTF-8 character.
#include <gtest/gtest.h>

#include "chat/chat_codec.h"
#include "server/response.h"

namespace sluice::server::server_logprobs_test {
namespace {

using nlohmann::json;

// Token 0 "a", 1 "\xe2\x80" and 2 "\xe2\x81" (two pieces of characters), 3 "é".
class PieceCodec : public chat::ChatCodec {
 public:
  std::string describe() const override { return "pieces"; }
  std::vector<int32_t> render_chat(const json&, const json&, const chat::ChatOptions&) const override { return {}; }
  std::vector<int32_t> encode(const std::string&, bool) const override { return {}; }
  std::unique_ptr<chat::Detokenizer> detokenizer() const override { return nullptr; }
  std::string token_bytes(int32_t id) const override {
    static const char* bytes[] = {"a", "\xe2\x80", "\xe2\x81", "\xc3\xa9"};
    return bytes[id];
  }
  std::vector<int32_t> stop_ids() const override { return {}; }
  chat::ReplySyntax reply_syntax(const std::vector<int32_t>&) const override { return {}; }
};

TEST(CompletionLogprobs, PiecesOfCharactersKeepTheirOwnKeys) {
  PieceCodec codec;
  chat::LogprobEntry e;
  e.token = 1;
  e.logprob = -0.5;
  e.top = {{1, -0.5}, {2, -1.5}, {0, -2.5}, {3, -3.5}};
  const json j = completion_logprobs_json({e}, codec, 10);
  EXPECT_EQ(j["tokens"][0], "bytes:\\xe2\\x80");
  const json& top = j["top_logprobs"][0];
  ASSERT_EQ(top.size(), 4u) << top.dump();
  EXPECT_EQ(top["bytes:\\xe2\\x80"], -0.5);
  EXPECT_EQ(top["bytes:\\xe2\\x81"], -1.5);
  EXPECT_EQ(top["a"], -2.5);
  EXPECT_EQ(top["\xc3\xa9"], -3.5);  // whole characters stay text
  EXPECT_EQ(j["text_offset"][0], 10);
}

}  // namespace
}  // namespace sluice::server::server_logprobs_test
