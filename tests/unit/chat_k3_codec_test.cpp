// Kimi K3 behind the server's codec: a checkpoint whose tokenizer has the XTML
// markers as special tokens is rendered natively (../shared/docs/kimi_k3.md §4:
// tool declaration, thinking effort, replayed reasoning and calls, tool results
// in call order, the generation prompt) and its replies are split into
// reasoning, content and typed tool calls however the text is cut.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "chat/api_error.h"
#include "chat/reply_parser.h"
#include "chat/text_codec.h"
#include "support/test_support.h"
#include "text/tokenizer.h"

namespace sluice::chat::chat_k3_codec_test {
namespace {

using nlohmann::json;

const std::string kEnd = "<|close|>message<|sep|><|end_of_msg|>";
const std::string kEffort =
    "<|open|>message role=\"system\" type=\"thinking-effort\"<|sep|>`thinking_effort` guides on how much to think in "
    "your thinking channel (not including the response channel), supported values include `low`, `medium`, `high`, "
    "and `max`.\nNow the system is invoked with `thinking_effort=";

struct K3 {
  test::TempDir tmp;
  std::unique_ptr<text::Tokenizer> tok;
  std::unique_ptr<TextChatCodec> codec;
  K3() {
    test::write_k3_tokenizer(tmp.file("k3"));
    tok = text::Tokenizer::load(tmp.file("k3"));
    codec = std::make_unique<TextChatCodec>(tmp.file("k3"), 600);
  }
  std::string render(const json& messages, const json& tools = nullptr, std::string effort = "") const {
    return tok->decode(codec->render_chat(messages, tools, ChatOptions{std::move(effort)}));
  }
};

TEST(K3Codec, RendersXtmlWithThinkingEffortAndGenerationPrompt) {
  K3 k;
  EXPECT_EQ(k.codec->family(), "kimi_k3");
  const json msgs = json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])");
  EXPECT_EQ(k.render(msgs), kEffort + "max`." + kEnd + "<|open|>message role=\"system\"<|sep|>Be brief." + kEnd +
                                "<|open|>message role=\"user\"<|sep|>Hi" + kEnd +
                                "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>");
  EXPECT_EQ(k.render(msgs, nullptr, "low").substr(0, kEffort.size() + 5), kEffort + "low`.");
  // Thinking off: no effort message, the prompt opens the response channel.
  const std::string off = k.render(msgs, nullptr, "none");
  EXPECT_EQ(off.find("thinking-effort"), std::string::npos);
  EXPECT_EQ(off.substr(off.size() - 62), "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>");
  // <|end_of_msg|> ends a reply.
  const auto stops = k.codec->stop_ids();
  EXPECT_NE(std::find(stops.begin(), stops.end(), *k.tok->token_id("<|end_of_msg|>")), stops.end());
}

TEST(K3Codec, ToolsReasoningAndResultsInCallOrder) {
  K3 k;
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get", "parameters":
      {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  const json msgs = json::parse(R"([{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "reasoning_content": "Two cities.", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "get", "arguments": "{\"city\": \"Oslo\", \"days\": 2}"}},
        {"id": "b", "type": "function", "function": {"name": "get", "arguments": "{\"city\": \"Rome\"}"}}]},
      {"role": "tool", "tool_call_id": "b", "content": "hot"},
      {"role": "tool", "tool_call_id": "a", "content": "cold"}])");
  const std::string s = k.render(msgs, tools, "high");
  const std::string declare =
      "<|open|>message role=\"system\" type=\"tool-declare\"<|sep|># Tools\nHere are the available tools, described "
      "in JSONSchema.\n\n```json\n[{\"function\":{\"name\":\"get\",\"parameters\":{\"properties\":{\"city\":{\"type\":"
      "\"string\"}},\"type\":\"object\"}},\"type\":\"function\"}]\n```" + kEnd;
  const std::string assistant =
      "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>Two cities.<|close|>think<|sep|><|open|>response"
      "<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"get\" index=\"0\"<|sep|><|open|>argument "
      "key=\"city\" type=\"string\"<|sep|>Oslo<|close|>argument<|sep|><|open|>argument key=\"days\" type=\"number\"<|sep|>"
      "2<|close|>argument<|sep|><|close|>call<|sep|><|open|>call tool=\"get\" index=\"1\"<|sep|><|open|>argument "
      "key=\"city\" type=\"string\"<|sep|>Rome<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>" + kEnd;
  const std::string results = "<|open|>message role=\"tool\" tool=\"get\" index=\"0\"<|sep|>cold" + kEnd +
                              "<|open|>message role=\"tool\" tool=\"get\" index=\"1\"<|sep|>hot" + kEnd;
  EXPECT_EQ(s, declare + kEffort + "high`." + kEnd + "<|open|>message role=\"user\"<|sep|>Weather?" + kEnd +
                   assistant + results + "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>");
}

TEST(K3Codec, ReplySplitsIntoReasoningContentAndTypedCallsHoweverCut) {
  K3 k;
  const auto prompt = k.codec->render_chat(json::parse(R"([{"role": "user", "content": "Hi"}])"), nullptr, {});
  const ReplySyntax syn = k.codec->reply_syntax(prompt);
  EXPECT_TRUE(syn.starts_in_reasoning);
  const std::string reply =
      "Think first.<|close|>think<|sep|><|open|>response<|sep|>Calling.<|close|>response<|sep|><|open|>tools<|sep|>"
      "<|open|>call tool=\"get\" index=\"0\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Oslo \"N\""
      "<|close|>argument<|sep|><|open|>argument key=\"days\" type=\"number\"<|sep|>2<|close|>argument<|sep|>"
      "<|open|>argument key=\"opts\" type=\"object\"<|sep|>{\"z\":true,\"a\":null}<|close|>argument<|sep|>"
      "<|close|>call<|sep|><|open|>call tool=\"f&amp;g\" index=\"1\"<|sep|><|open|>json type=\"object\"<|sep|>{raw"
      "<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>";
  for (size_t piece : {reply.size(), size_t(1), size_t(3), size_t(7)}) {
    ReplyParser p(syn, true);
    ReplyDelta all;
    for (size_t at = 0; at < reply.size(); at += piece) all.append(p.push(reply.substr(at, piece)));
    all.append(p.finish());
    EXPECT_EQ(all.reasoning, "Think first.") << piece;
    EXPECT_EQ(all.content, "Calling.") << piece;
    ASSERT_EQ(all.tool_calls.size(), 2u) << piece;
    EXPECT_EQ(all.tool_calls[0].name, "get");
    EXPECT_EQ(all.tool_calls[0].arguments, R"({"city":"Oslo \"N\"","days":2,"opts":{"z":true,"a":null}})");
    EXPECT_EQ(all.tool_calls[1].name, "f&g");
    EXPECT_EQ(all.tool_calls[1].arguments, "{raw");
    EXPECT_EQ(p.calls_seen(), 2);
  }
  // A value that does not parse as its type is kept as a string: the call's name went
  // out as it was generated (streamed replies), so the call stands.
  ReplyParser p(syn, true);
  ReplyDelta d = p.push("ok<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
                        "<|open|>call tool=\"get\" index=\"0\"<|sep|><|open|>argument key=\"n\" type=\"number\"<|sep|>"
                        "abc<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>");
  d.append(p.finish());
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"n":"abc"})");
  EXPECT_EQ(d.content, "");
  // A call without a tool name is not a call: the text stays visible.
  ReplyParser q(syn, true);
  ReplyDelta e = q.push("ok<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
                        "<|open|>call index=\"0\"<|sep|>abc<|close|>call<|sep|><|close|>tools<|sep|>");
  e.append(q.finish());
  EXPECT_TRUE(e.tool_calls.empty());
  EXPECT_NE(e.content.find("abc"), std::string::npos);
}

TEST(K3Codec, ConversationsXtmlCannotWriteAre400s) {
  K3 k;
  try {
    k.render(json::parse(R"([{"role": "function", "content": "x"}])"));
    FAIL() << "rendered an unknown role";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "messages");
  }
}


// Issue 38, finding 1: a call's arguments nested 100,000 deep overflowed the stack
// while the XTML writer serialised them (one request took the server down). Any
// nesting past the shared limit is a 400 naming it, through every route that
// renders a conversation (chat completions, Responses items, /apply-template).
TEST(K3Codec, DeeplyNestedArgumentsAre400sNamingTheLimit) {
  K3 k;
  const std::string deep = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  for (const json& args : {json(deep), json("{\"a\":" + std::string(64, '[') + std::string(64, ']') + "}")}) {
    json msgs = json::array({{{"role", "user"}, {"content", "hi"}},
                             {{"role", "assistant"},
                              {"content", ""},
                              {"tool_calls", json::array({{{"id", "c1"},
                                                           {"type", "function"},
                                                           {"function", {{"name", "f"}, {"arguments", args}}}}})}}});
    try {
      k.render(msgs);
      FAIL() << "rendered arguments nested " << args.get<std::string>().size() / 2 << " deep";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_NE(std::string(e.what()).find("nested deeper than 64 levels"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("arguments"), std::string::npos) << e.what();
    }
  }
  // At the limit (the object and 63 arrays) it renders.
  const std::string ok = "{\"a\":" + std::string(63, '[') + std::string(63, ']') + "}";
  json msgs = json::array({{{"role", "user"}, {"content", "hi"}},
                           {{"role", "assistant"},
                            {"content", ""},
                            {"tool_calls", json::array({{{"id", "c1"}, {"function", {{"name", "f"}, {"arguments", ok}}}}})}}});
  EXPECT_NE(k.render(msgs).find(std::string(63, '[')), std::string::npos);
}

}  // namespace
}  // namespace sluice::chat::chat_k3_codec_test
