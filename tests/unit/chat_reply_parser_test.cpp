// Reply splitting: content, <think> reasoning and each family's tool-call
// syntax, fed whole and one byte at a time (as streaming does).
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "chat/reply_parser.h"

namespace sluice::chat::chat_reply_parser_test {
namespace {

ReplyDelta run(const ReplySyntax& syn, bool tools, const std::string& text, size_t piece, bool cut = false) {
  ReplyParser p(syn, tools);
  ReplyDelta all;
  for (size_t i = 0; i < text.size(); i += piece) all.append(p.push(text.substr(i, piece)));
  all.append(p.finish(cut));
  // A call's streamed pieces are its arguments, and it ends with them.
  std::map<size_t, std::string> args;
  std::map<size_t, bool> ended;
  for (const auto& part : all.call_parts) {
    if (part.begins) {
      EXPECT_FALSE(args.count(part.index)) << "call " << part.index << " begins twice";
    }
    args[part.index] += part.arguments;
    if (part.ends) ended[part.index] = true;
  }
  size_t complete = 0;
  for (const auto& [i, a] : args)
    if (ended[i]) {
      EXPECT_LT(complete, all.tool_calls.size());
      if (complete < all.tool_calls.size()) {
        EXPECT_EQ(a, all.tool_calls[complete].arguments) << "call " << i;
      }
      ++complete;
    }
  EXPECT_EQ(complete, all.tool_calls.size());
  return all;
}

// The same answer whether the text arrives at once or byte by byte.
ReplyDelta both(const ReplySyntax& syn, bool tools, const std::string& text) {
  ReplyDelta a = run(syn, tools, text, text.size() + 1), b = run(syn, tools, text, 1);
  EXPECT_EQ(a.content, b.content);
  EXPECT_EQ(a.reasoning, b.reasoning);
  EXPECT_EQ(a.tool_calls.size(), b.tool_calls.size());
  for (size_t i = 0; i < std::min(a.tool_calls.size(), b.tool_calls.size()); ++i) {
    EXPECT_EQ(a.tool_calls[i].name, b.tool_calls[i].name);
    EXPECT_EQ(a.tool_calls[i].arguments, b.tool_calls[i].arguments);
  }
  return a;
}

TEST(ReplyParser, PlainContentPassesThrough) {
  auto r = both(qwen3_syntax(), true, "Hello <b>world</b> < tool");
  EXPECT_EQ(r.content, "Hello <b>world</b> < tool");
  EXPECT_TRUE(r.tool_calls.empty());
}

TEST(ReplyParser, ThinkingGoesToReasoning) {
  auto r = both(deepseek_v3_syntax(), false, "<think>Let me see.\nOK.</think>\n\nThe answer is 4.");
  EXPECT_EQ(r.reasoning, "Let me see.\nOK.");
  EXPECT_EQ(r.content, "The answer is 4.");
  ReplySyntax opened = qwen3_syntax();
  opened.starts_in_reasoning = true;
  r = both(opened, false, "hmm</think>done");
  EXPECT_EQ(r.reasoning, "hmm");
  EXPECT_EQ(r.content, "done");
  r = both(qwen3_syntax(), false, "text then <think>not reasoning</think>");
  EXPECT_EQ(r.content, "text then <think>not reasoning</think>");
}

TEST(ReplyParser, DeepSeekToolCalls) {
  const std::string text =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"
      "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>";
  auto r = both(deepseek_v3_syntax(), true, text);
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(r.tool_calls[0].arguments), nlohmann::json({{"city", "Paris"}}));
  EXPECT_EQ(r.tool_calls[1].name, "get_time");
  EXPECT_EQ(r.tool_calls[1].arguments, "{}");
  EXPECT_EQ(r.tool_calls[0].id.rfind("call_", 0), 0u);
  EXPECT_NE(r.tool_calls[0].id, r.tool_calls[1].id);
  EXPECT_EQ(r.content, "");
  // Without fences too.
  r = both(deepseek_v3_syntax(), true,
           "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n{\"a\":1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, "{\"a\":1}");
}

TEST(ReplyParser, KimiToolCallsKeepTheirIds) {
  const std::string text =
      "Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0<|tool_call_argument_begin|>{\"q\": \"x\"}"
      "<|tool_call_end|><|tool_calls_section_end|>";
  auto r = both(kimi_k2_syntax(), true, text);
  EXPECT_EQ(r.content, "Sure.");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].id, "functions.search:0");
  EXPECT_EQ(r.tool_calls[0].name, "search");
  EXPECT_EQ(r.tool_calls[0].arguments, "{\"q\": \"x\"}");
}

TEST(ReplyParser, QwenToolCalls) {
  auto r = both(qwen3_syntax(), true,
                "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>\n"
                "<tool_call>\n{\"name\": \"neg\", \"arguments\": {\"a\": 3}}\n</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].name, "add");
  EXPECT_EQ(nlohmann::json::parse(r.tool_calls[0].arguments), nlohmann::json({{"a", 1}, {"b", 2}}));
  EXPECT_EQ(r.tool_calls[1].name, "neg");
  EXPECT_EQ(r.content, "");  // the newline between calls is not content
}

// gpt-oss harmony: the analysis channel is reasoning, the final channel content;
// a call (either placement of its recipient) ends where generation stops at <|call|>.
TEST(ReplyParser, HarmonyChannelsAndCalls) {
  auto r = both(gpt_oss_syntax(), true,
                "<|channel|>analysis<|message|>User greets.<|end|><|start|>assistant<|channel|>final<|message|>Hello!");
  EXPECT_EQ(r.reasoning, "User greets.");
  EXPECT_EQ(r.content, "Hello!");
  EXPECT_TRUE(r.tool_calls.empty());
  auto c = both(gpt_oss_syntax(), true,
                "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
                "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}");
  EXPECT_EQ(c.reasoning, "Need weather.");
  EXPECT_EQ(c.content, "");
  ASSERT_EQ(c.tool_calls.size(), 1u);
  EXPECT_EQ(c.tool_calls[0].name, "get_weather");
  EXPECT_EQ(c.tool_calls[0].arguments, "{\"city\":\"Oslo\"}");
  auto h = both(gpt_oss_syntax(), true, " to=functions.add<|channel|>commentary json<|message|>{\"a\":1}<|call|>");
  ASSERT_EQ(h.tool_calls.size(), 1u);
  EXPECT_EQ(h.tool_calls[0].name, "add");
  EXPECT_EQ(h.tool_calls[0].arguments, "{\"a\":1}");
  EXPECT_EQ(h.content, "");
  // A preamble to the user in the commentary channel is content; without tools a call stays text.
  auto p = both(gpt_oss_syntax(), true, "<|channel|>commentary<|message|>Checking.");
  EXPECT_EQ(p.content, "Checking.");
  auto t = both(gpt_oss_syntax(), false, "<|channel|>commentary to=functions.add <|constrain|>json<|message|>{}");
  EXPECT_TRUE(t.tool_calls.empty());
  EXPECT_NE(t.content.find("to=functions.add"), std::string::npos) << t.content;
}

TEST(ReplyParser, WithoutToolsMarkersAreContent) {
  const std::string text = "<tool_call>{\"name\": \"x\"}</tool_call>";
  auto r = both(qwen3_syntax(), false, text);
  EXPECT_EQ(r.content, text);
  EXPECT_TRUE(r.tool_calls.empty());
}

TEST(ReplyParser, MalformedOrUnfinishedCallsStayVisible) {
  auto r = both(qwen3_syntax(), true, "<tool_call>not json</tool_call>");
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.content, "<tool_call>not json</tool_call>");
  // Generation ended (an end-of-turn token) before the end marker: the call stands.
  r = both(qwen3_syntax(), true, "<tool_call>{\"name\": \"done\", \"arguments\": {}}");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "done");
}

// max_tokens ending the reply inside a call: the call never completes (its streamed
// parts end with `cut`), it is not returned, and no markup is shown as content.
TEST(ReplyParser, ACallCutOffByMaxTokensIsDropped) {
  struct Case {
    ReplySyntax syn;
    std::string before, cut_call;
  };
  const std::vector<Case> cases = {
      {qwen3_syntax(), "Sure.", "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\""},
      {deepseek_v3_syntax(), "Sure.", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{\"a\": 1"},
      {kimi_k2_syntax(), "Sure.", "<|tool_calls_section_begin|><|tool_call_begin|>functions.add:0<|tool_call_argument_begin|>{\"a\""},
      {kimi_k3_syntax(), "", "<|open|>tools<|sep|><|open|>call tool=\"add\" index=\"0\"<|sep|><|open|>argument key=\"a\" type=\"number\"<|sep|>1"},
      {gpt_oss_syntax(), "", "<|channel|>commentary to=functions.add <|constrain|>json<|message|>{\"a\": 1"},
      // Cut before the name is out, or inside a marker.
      {qwen3_syntax(), "Sure.", "<tool_call>\n{\"na"},
      {qwen3_syntax(), "Sure.", "<tool_c"},
  };
  for (const auto& c : cases) {
    for (size_t piece : {size_t(1), size_t(3), c.before.size() + c.cut_call.size()}) {
      SCOPED_TRACE(c.syn.name + " " + c.cut_call + " in pieces of " + std::to_string(piece));
      ReplyDelta r = run(c.syn, true, c.before + c.cut_call, piece, /*cut=*/true);
      EXPECT_TRUE(r.tool_calls.empty());
      EXPECT_EQ(r.content, c.syn.name == "kimi_k3" || c.syn.name == "gpt_oss" ? "" : "Sure.");
      for (const auto& part : r.call_parts) EXPECT_FALSE(part.ends);
      if (!r.call_parts.empty()) {
        EXPECT_TRUE(r.call_parts.back().cut);
      }
    }
  }
  // A complete call before the cut one stays.
  ReplyDelta r = run(qwen3_syntax(), true,
                     "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"x\"", 2,
                     true);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, "{\"a\": 1}");
}

// Arguments go out while the call is still being written, in each family's syntax;
// the pieces are the arguments as the model wrote them (K3's typed ones as JSON).
TEST(ReplyParser, ArgumentsStreamAsTheyAreGenerated) {
  struct Case {
    ReplySyntax syn;
    std::string call, name, arguments;
  };
  const std::vector<Case> cases = {
      {qwen3_syntax(), "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"path\": \"a.txt\", \"text\": \"a long text\"}}\n</tool_call>",
       "write", "{\"path\": \"a.txt\", \"text\": \"a long text\"}"},
      {deepseek_v3_syntax(),
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>write\n```json\n{\"path\": \"a.txt\", \"text\": \"a long text\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "write", "{\"path\": \"a.txt\", \"text\": \"a long text\"}"},
      {kimi_k2_syntax(),
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.write:0<|tool_call_argument_begin|>{\"path\": \"a.txt\", \"text\": \"a long text\"}<|tool_call_end|><|tool_calls_section_end|>",
       "write", "{\"path\": \"a.txt\", \"text\": \"a long text\"}"},
      {kimi_k3_syntax(),
       "<|open|>tools<|sep|><|open|>call tool=\"write\" index=\"0\"<|sep|><|open|>argument key=\"path\" type=\"string\"<|sep|>a.txt<|close|>argument<|sep|>"
       "<|open|>argument key=\"n\" type=\"number\"<|sep|>2<|close|>argument<|sep|><|open|>argument key=\"text\" type=\"string\"<|sep|>a \"long\" text\n<|close|>argument<|sep|>"
       "<|close|>call<|sep|><|close|>tools<|sep|>",
       "write", "{\"path\":\"a.txt\",\"n\":2,\"text\":\"a \\\"long\\\" text\\n\"}"},
      {gpt_oss_syntax(), "<|channel|>commentary to=functions.write <|constrain|>json<|message|>{\"path\": \"a.txt\", \"text\": \"a long text\"}",
       "write", "{\"path\": \"a.txt\", \"text\": \"a long text\"}"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.syn.name);
    ReplyDelta r = both(c.syn, true, c.call);
    ASSERT_EQ(r.tool_calls.size(), 1u);
    EXPECT_EQ(r.tool_calls[0].name, c.name);
    EXPECT_EQ(r.tool_calls[0].arguments, c.arguments);
    // Fed a byte at a time: the name is out, and arguments with it, before the call's text ends.
    ReplyParser p(c.syn, true);
    std::string streamed;
    bool begun = false;
    size_t pieces = 0;
    const size_t end = c.call.find("text") + 4;  // well inside the arguments
    for (size_t i = 0; i < end; ++i)
      for (const auto& part : p.push(c.call.substr(i, 1)).call_parts) {
        begun = begun || part.begins;
        if (part.begins) {
          EXPECT_EQ(part.name, c.name);
        }
        streamed += part.arguments;
        pieces += !part.arguments.empty();
      }
    EXPECT_TRUE(begun);
    EXPECT_GT(pieces, 1u);
    EXPECT_EQ(c.arguments.compare(0, streamed.size(), streamed), 0) << streamed;
    EXPECT_GT(streamed.size(), c.arguments.find("a.txt")) << streamed;
  }
}

TEST(ReplyParser, HoldsBackOnlyPossibleMarkerStarts) {
  ReplyParser p(qwen3_syntax(), true);
  EXPECT_EQ(p.push("abc <tool").content, "abc");  // the space waits too: whitespace is released with what follows
  EXPECT_EQ(p.push("box>").content, " <toolbox>");
  EXPECT_EQ(p.push("\n").content, "");  // whitespace waits for what follows it
  EXPECT_EQ(p.push("x").content, "\nx");
}

// Found by reply_parser_fuzz: content after a call that ended in whitespace kept
// the newline when the text came whole and dropped it when it came in pieces.
TEST(ReplyParser, TrailingWhitespaceDoesNotDependOnHowTheTextIsCut) {
  const std::string text =
      "text <tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call> more\n{\"x\": 1}\n";
  auto collect = [&](size_t piece) {
    ReplyParser p(qwen3_syntax(), true);
    ReplyDelta all;
    for (size_t at = 0; at < text.size(); at += piece) all.append(p.push(text.substr(at, piece)));
    all.append(p.finish());
    return all;
  };
  const ReplyDelta whole = collect(text.size());
  EXPECT_EQ(whole.content, "text  more\n{\"x\": 1}");  // the final newline is not content
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  for (size_t piece = 1; piece < 9; ++piece) {
    const ReplyDelta d = collect(piece);
    EXPECT_EQ(d.content, whole.content) << "pieces of " << piece;
    EXPECT_EQ(d.tool_calls.size(), 1u);
  }
}

}  // namespace
}  // namespace sluice::chat::chat_reply_parser_test
