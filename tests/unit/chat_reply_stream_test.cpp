// ReplyStream's accounting: completion tokens, and of them the reasoning tokens
// (usage.completion_tokens_details.reasoning_tokens), fed a byte at a time
// through the byte codec (Qwen3 syntax: <think>...</think>).
#include <gtest/gtest.h>

#include <string>

#include "chat/chat_codec.h"
#include "chat/reply_stream.h"
#include "chat/generation_request.h"

namespace sluice::chat::chat_reply_stream_test {
namespace {

struct Fed {
  Outcome out;
  std::string content, reasoning;
};

Fed feed_reply(const std::string& reply) {
  ByteCodec codec(300);
  GenerationRequest req;
  req.messages = nlohmann::json::array({{{"role", "user"}, {"content", "hi"}}});
  const auto prompt = codec.render_chat(req.messages, nullptr);
  GenerationCounters counters;
  Fed f;
  auto emit = [&](const ReplyDelta& d, const std::vector<LogprobEntry>&) {
    f.content += d.content;
    f.reasoning += d.reasoning;
    return true;
  };
  ReplyStream rs(req, codec, prompt, {}, 300, counters, emit, {});
  for (unsigned char c : reply) EXPECT_TRUE(rs.take(int32_t(c)));
  rs.finish(f.out);
  return f;
}

TEST(ReplyStreamUsage, CountsTheTokensOfTheReasoningBlock) {
  // "<think>" is 7 byte tokens: the parser enters the block at its last byte, which
  // counts; the 3 reasoning bytes and the 8 of "</think>" count; "hi" does not.
  const Fed f = feed_reply("<think>abc</think>hi");
  EXPECT_EQ(f.reasoning, "abc");
  EXPECT_EQ(f.content, "hi");
  EXPECT_EQ(f.out.completion_tokens, 20);
  EXPECT_EQ(f.out.reasoning_tokens, 1 + 3 + 8);
  EXPECT_EQ(f.out.finish_reason, "length");
}

TEST(ReplyStreamUsage, NoReasoningBlockNoReasoningTokens) {
  const Fed f = feed_reply("plain answer");
  EXPECT_EQ(f.content, "plain answer");
  EXPECT_EQ(f.out.completion_tokens, 12);
  EXPECT_EQ(f.out.reasoning_tokens, 0);
}

TEST(ReplyStreamUsage, AnUnclosedReasoningBlockCountsToTheEnd) {
  const Fed f = feed_reply("<think>still thinking");
  EXPECT_EQ(f.reasoning, "still thinking");
  EXPECT_EQ(f.out.reasoning_tokens, 1 + 14);
}

}  // namespace
}  // namespace sluice::chat::chat_reply_stream_test
