// ReplyReplay (chat/reply_replay.h): a reply the server generated, sent back by
// the client in its own form (arguments re-serialized, reasoning left out, ids
// as the Anthropic writer spells them), is fed as the tokens generated, after
// the prompt it was generated from; the template renders only what follows it.
// A ChatML-like codec with two special tokens stands in for a model's template.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chat/chat_codec.h"
#include "chat/reply_replay.h"
#include "chat/reply_stream.h"

namespace sluice::chat::chat_reply_replay_test {
namespace {

using nlohmann::json;

constexpr int32_t kStart = 300, kEnd = 301;  // <|im_start|>, <|im_end|> (the end-of-turn token)

std::vector<int32_t> bytes(const std::string& s) {
  std::vector<int32_t> ids;
  for (unsigned char c : s) ids.push_back(int32_t(c));
  return ids;
}

// ChatML with special turn markers; calls as Qwen3-style text with the arguments as sent,
// reasoning in <think> blocks. Counts its renders.
// With `calls_unended`, a turn with calls has no end-of-turn marker (DeepSeek-V3's template);
// with `shape_dependent`, a tool result after a turn with calls is written otherwise.
class FakeCodec : public ChatCodec {
 public:
  bool calls_unended = false, shape_dependent = false;
  mutable int renders = 0;
  std::string describe() const override { return "fake"; }
  std::vector<int32_t> render_chat(const json& messages, const json& tools, const ChatOptions&) const override {
    ++renders;
    std::vector<int32_t> ids;
    auto add = [&](const std::string& s) { for (int32_t t : bytes(s)) ids.push_back(t); };
    if (tools.is_array() && !tools.empty()) {
      ids.push_back(kStart);
      add("system\n" + tools.dump());
      ids.push_back(kEnd);
      add("\n");
    }
    bool after_calls = false;
    for (const auto& m : messages) {
      ids.push_back(kStart);
      add(m["role"].get<std::string>() + (shape_dependent && after_calls ? "-after-call" : "") + "\n");
      after_calls = m.contains("tool_calls");
      if (m.contains("reasoning_content")) add("<think>" + m["reasoning_content"].get<std::string>() + "</think>");
      if (m["content"].is_string()) add(m["content"].get<std::string>());
      if (m.contains("tool_calls"))
        for (const auto& c : m["tool_calls"])
          add("<tool_call>{\"name\": " + json(c["function"]["name"]).dump() +
              ", \"arguments\": " + c["function"]["arguments"].get<std::string>() + "}</tool_call>");
      if (calls_unended && m.contains("tool_calls")) continue;
      ids.push_back(kEnd);
      add("\n");
    }
    ids.push_back(kStart);
    add("assistant\n");
    return ids;
  }
  std::vector<int32_t> encode(const std::string& text, bool) const override { return bytes(text); }
  std::unique_ptr<Detokenizer> detokenizer() const override { return nullptr; }
  std::string token_bytes(int32_t id) const override { return id < 256 ? std::string(1, char(id)) : std::string(); }
  std::vector<int32_t> stop_ids() const override { return {kEnd}; }
  bool is_marker(int32_t id) const override { return id >= 256; }
  ReplySyntax reply_syntax(const std::vector<int32_t>&) const override { return qwen3_syntax(); }
};

const json kTools = json::array({{{"type", "function"}, {"function", {{"name", "read"}}}}});

json conversation() {
  return json::array({{{"role", "system"}, {"content", "You are an agent."}}, {{"role", "user"}, {"content", "Read a.txt"}}});
}

// What the model "generated" after the prompt: reasoning, then a call whose arguments it wrote
// compactly in its own key order, then the end-of-turn token.
GeneratedReply generated_call(const std::string& id = "call_abc") {
  GeneratedReply g;
  g.tokens = bytes("<think>I should read it.</think><tool_call>{\"name\": \"read\", \"arguments\": {\"path\":\"a.txt\",\"lines\":10}}</tool_call>");
  g.tokens.push_back(kEnd);
  g.ended_by_stop_token = true;
  g.reasoning = "I should read it.";
  g.calls.push_back({id, "read", "{\"path\":\"a.txt\",\"lines\":10}"});
  return g;
}

// The same reply as a client sends it back: arguments re-serialized (other order and spacing), no reasoning.
json sent_back(const std::string& id = "call_abc", const std::string& args = "{\"lines\": 10, \"path\": \"a.txt\"}") {
  return {{"role", "assistant"},
          {"content", nullptr},
          {"tool_calls", json::array({{{"id", id}, {"type", "function"}, {"function", {{"name", "read"}, {"arguments", args}}}}})}};
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(ReplyReplay, SameReplyComparesArgumentsAsValuesAndIdsWithoutPrefix) {
  const GeneratedReply g = generated_call();
  EXPECT_TRUE(ReplyReplay::same_reply(sent_back(), g));
  EXPECT_TRUE(ReplyReplay::same_reply(sent_back("toolu_abc"), g));  // the Anthropic writer's spelling of the id
  EXPECT_FALSE(ReplyReplay::same_reply(sent_back("call_abd"), g));
  EXPECT_FALSE(ReplyReplay::same_reply(sent_back("call_abc", "{\"lines\": 11, \"path\": \"a.txt\"}"), g));
  EXPECT_FALSE(ReplyReplay::same_reply(sent_back("call_abc", "{\"path\": \"a.txt\"}"), g));
  json with_reasoning = sent_back();
  with_reasoning["reasoning_content"] = "I should read it.\n";
  EXPECT_TRUE(ReplyReplay::same_reply(with_reasoning, g));
  with_reasoning["reasoning_content"] = "Something else.";
  EXPECT_FALSE(ReplyReplay::same_reply(with_reasoning, g));
  json with_text = sent_back();
  with_text["content"] = "Reading.";
  EXPECT_FALSE(ReplyReplay::same_reply(with_text, g));
  // A text reply: the same text, surrounding whitespace aside.
  GeneratedReply t;
  t.content = "It says hello.";
  EXPECT_TRUE(ReplyReplay::same_reply({{"role", "assistant"}, {"content", "It says hello.\n"}}, t));
  EXPECT_FALSE(ReplyReplay::same_reply({{"role", "assistant"}, {"content", "It says hello!"}}, t));
  EXPECT_FALSE(ReplyReplay::same_reply({{"role", "user"}, {"content", "It says hello."}}, t));
}

TEST(ReplyReplay, ReSentCallIsFedAsGeneratedAfterItsPrompt) {
  FakeCodec codec;
  ReplyReplay replay(codec);
  const json turn1 = conversation();
  const auto p1 = codec.render_chat(turn1, kTools, {});
  const GeneratedReply g = generated_call();
  ASSERT_TRUE(replay.record(turn1, kTools, {}, p1, g));
  EXPECT_EQ(replay.size(), 1u);

  json turn2 = turn1;
  turn2.push_back(sent_back());
  turn2.push_back({{"role", "tool"}, {"tool_call_id", "call_abc"}, {"content", "hello"}});
  const auto rendered = codec.render_chat(turn2, kTools, {});
  const auto r = replay.apply(turn2, kTools, {}, rendered);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->message, 2u);
  EXPECT_EQ(r->tokens, int64_t(p1.size() + g.tokens.size()));
  // The earlier prompt, the generated tokens, then the template's glue and the tool result.
  std::vector<int32_t> tail = bytes("\n");
  tail.push_back(kStart);
  tail = concat(tail, bytes("tool\nhello"));
  tail.push_back(kEnd);
  tail = concat(tail, bytes("\n"));
  tail.push_back(kStart);
  tail = concat(tail, bytes("assistant\n"));
  EXPECT_EQ(r->prompt, concat(concat(p1, g.tokens), tail));
  // The plain rendering differs inside the reply (re-serialized arguments, no reasoning).
  EXPECT_NE(r->prompt, rendered);

  // Anthropic's ids and a tool result in a user turn: the same.
  json turn2a = turn1;
  turn2a.push_back(sent_back("toolu_abc"));
  turn2a.push_back({{"role", "user"}, {"content", "thanks"}});
  EXPECT_TRUE(replay.apply(turn2a, kTools, {}, codec.render_chat(turn2a, kTools, {})));
}

TEST(ReplyReplay, OnlyAfterTheSameConversationAndForTheSameReply) {
  FakeCodec codec;
  ReplyReplay replay(codec);
  const json turn1 = conversation();
  ASSERT_TRUE(replay.record(turn1, kTools, {}, codec.render_chat(turn1, kTools, {}), generated_call()));
  auto try_apply = [&](json turn2, const json& tools, const ChatOptions& opts = {}) {
    turn2.push_back({{"role", "tool"}, {"tool_call_id", "call_abc"}, {"content", "hello"}});
    return replay.apply(turn2, tools, opts, codec.render_chat(turn2, tools, opts)).has_value();
  };
  json same = turn1;
  same.push_back(sent_back());
  EXPECT_TRUE(try_apply(same, kTools));
  // Another message before the reply, other tools, another reasoning effort: not the conversation it followed.
  json edited = same;
  edited[1]["content"] = "Read b.txt";
  EXPECT_FALSE(try_apply(edited, kTools));
  EXPECT_FALSE(try_apply(same, json::array({{{"type", "function"}, {"function", {{"name", "write"}}}}})));
  EXPECT_FALSE(try_apply(same, kTools, ChatOptions{"none"}));
  // Arguments that are not the generated ones, another id.
  json other_args = turn1;
  other_args.push_back(sent_back("call_abc", "{\"lines\": 12, \"path\": \"a.txt\"}"));
  EXPECT_FALSE(try_apply(other_args, kTools));
  json other_id = turn1;
  other_id.push_back(sent_back("call_xyz"));
  EXPECT_FALSE(try_apply(other_id, kTools));
  // A reply that is the last message (to be continued) is rendered as sent.
  json last = same;
  EXPECT_FALSE(replay.apply(last, kTools, {}, codec.render_chat(last, kTools, {})));
}

TEST(ReplyReplay, LaterTurnsChainOnTheReplayedPrompt) {
  FakeCodec codec;
  ReplyReplay replay(codec);
  json conv = conversation();
  const auto p1 = codec.render_chat(conv, kTools, {});
  const GeneratedReply g1 = generated_call();
  ASSERT_TRUE(replay.record(conv, kTools, {}, p1, g1));
  conv.push_back(sent_back());
  conv.push_back({{"role", "tool"}, {"tool_call_id", "call_abc"}, {"content", "hello"}});
  const auto r2 = replay.apply(conv, kTools, {}, codec.render_chat(conv, kTools, {}));
  ASSERT_TRUE(r2);
  // Turn 2's reply: text. Turn 3 sends both replies back; the latest is replayed, after turn 2's prompt.
  GeneratedReply g2;
  g2.tokens = bytes("The file says hello.");
  g2.tokens.push_back(kEnd);
  g2.ended_by_stop_token = true;
  g2.content = "The file says hello.";
  ASSERT_TRUE(replay.record(conv, kTools, {}, r2->prompt, g2));
  conv.push_back({{"role", "assistant"}, {"content", "The file says hello."}});
  conv.push_back({{"role", "user"}, {"content", "Thanks."}});
  const auto r3 = replay.apply(conv, kTools, {}, codec.render_chat(conv, kTools, {}));
  ASSERT_TRUE(r3);
  EXPECT_EQ(r3->message, 4u);
  // Its prompt starts with turn 2's whole prompt (the first reply as generated) and the second reply.
  const auto head = concat(r2->prompt, g2.tokens);
  ASSERT_GE(r3->prompt.size(), head.size());
  EXPECT_TRUE(std::equal(head.begin(), head.end(), r3->prompt.begin()));
}

TEST(ReplyReplay, KeepsOnlyCompleteRepliesWithinItsBytes) {
  FakeCodec codec;
  const json turn1 = conversation();
  const auto p1 = codec.render_chat(turn1, kTools, {});
  {
    ReplyReplay replay(codec);
    GeneratedReply cut = generated_call();
    cut.ended_by_stop_token = false;  // max_tokens, a stop string, a grammar's end
    EXPECT_FALSE(replay.record(turn1, kTools, {}, p1, cut));
    EXPECT_EQ(replay.size(), 0u);
  }
  {
    ReplyReplay off(codec, 0);
    EXPECT_FALSE(off.record(turn1, kTools, {}, p1, generated_call()));
  }
  // Room for two: the least recently used is forgotten first.
  ReplyReplay one(codec, size_t(1) << 20);
  ASSERT_TRUE(one.record(turn1, kTools, {}, p1, generated_call("call_1")));
  const size_t each = one.bytes();
  ASSERT_GT(each, p1.size() * 4);
  ReplyReplay two(codec, each * 2 + each / 2);
  auto turn2 = [&](const std::string& id) {
    json c = turn1;
    c.push_back(sent_back(id));
    c.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", "hello"}});
    return two.apply(c, kTools, {}, codec.render_chat(c, kTools, {})).has_value();
  };
  ASSERT_TRUE(two.record(turn1, kTools, {}, p1, generated_call("call_1")));
  ASSERT_TRUE(two.record(turn1, kTools, {}, p1, generated_call("call_2")));
  EXPECT_TRUE(turn2("call_1"));  // now the most recently used
  ASSERT_TRUE(two.record(turn1, kTools, {}, p1, generated_call("call_3")));
  EXPECT_EQ(two.size(), 2u);
  EXPECT_LE(two.bytes(), each * 2 + each / 2);
  EXPECT_TRUE(turn2("call_1"));
  EXPECT_FALSE(turn2("call_2"));
  EXPECT_TRUE(turn2("call_3"));
}

TEST(ReplyReplay, NoReplayWhereTheReplysEndCannotBeFound) {
  // The model ended with another token than the template's end of turn (an eos): the
  // end of the reply in the rendering is not known, so the prompt is the plain rendering.
  FakeCodec codec;
  ReplyReplay replay(codec);
  const json turn1 = conversation();
  GeneratedReply g = generated_call();
  g.tokens.back() = 299;
  ASSERT_TRUE(replay.record(turn1, kTools, {}, codec.render_chat(turn1, kTools, {}), g));
  json turn2 = turn1;
  turn2.push_back(sent_back());
  turn2.push_back({{"role", "tool"}, {"tool_call_id", "call_abc"}, {"content", "hello"}});
  EXPECT_FALSE(replay.apply(turn2, kTools, {}, codec.render_chat(turn2, kTools, {})));
}

TEST(ReplyReplay, ATemplateThatWritesNoEndAfterCalls) {
  // DeepSeek-V3's template writes the next message right after a call; the model ended its
  // turn with the end-of-turn token: the prompt has it, then the template's rendering after the call.
  FakeCodec codec;
  codec.calls_unended = true;
  ReplyReplay replay(codec);
  const json turn1 = conversation();
  const auto p1 = codec.render_chat(turn1, kTools, {});
  const GeneratedReply g = generated_call();
  ASSERT_TRUE(replay.record(turn1, kTools, {}, p1, g));
  json turn2 = turn1;
  turn2.push_back(sent_back());
  turn2.push_back({{"role", "tool"}, {"tool_call_id", "call_abc"}, {"content", "hello"}});
  const auto r = replay.apply(turn2, kTools, {}, codec.render_chat(turn2, kTools, {}));
  ASSERT_TRUE(r);
  std::vector<int32_t> tail = {kStart};
  tail = concat(tail, bytes("tool\nhello"));
  tail.push_back(kEnd);
  tail = concat(tail, bytes("\n"));
  tail.push_back(kStart);
  tail = concat(tail, bytes("assistant\n"));
  EXPECT_EQ(r->prompt, concat(concat(p1, g.tokens), tail));
}

TEST(ReplyReplay, NoReplayWhereWhatFollowsDependsOnTheReplysShape) {
  // The tool result is written otherwise after a turn with calls: a plain text turn does not
  // show where the reply ends, so the plain rendering is used.
  FakeCodec codec;
  codec.shape_dependent = true;
  ReplyReplay replay(codec);
  const json turn1 = conversation();
  ASSERT_TRUE(replay.record(turn1, kTools, {}, codec.render_chat(turn1, kTools, {}), generated_call()));
  json turn2 = turn1;
  turn2.push_back(sent_back());
  turn2.push_back({{"role", "tool"}, {"tool_call_id", "call_abc"}, {"content", "hello"}});
  EXPECT_FALSE(replay.apply(turn2, kTools, {}, codec.render_chat(turn2, kTools, {})));
}

TEST(ReplyReplay, ReplyStreamRecordsWhatItGenerated) {
  ByteCodec codec(300);
  GenerationRequest req;
  req.messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  req.tools = kTools;
  const auto prompt = codec.render_chat(req.messages, req.tools);
  GenerationCounters counters;
  auto run = [&](const std::string& text, bool stop) {
    ReplyStream rs(req, codec, prompt, {299}, 300, counters, [](const ReplyDelta&, const std::vector<LogprobEntry>&) { return true; }, {});
    for (unsigned char c : text) EXPECT_TRUE(rs.take(int32_t(c)));
    if (stop) {
      EXPECT_FALSE(rs.take(299));
    }
    Outcome out;
    rs.finish(out);
    return out;
  };
  const std::string call = "<think>hm</think><tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\":\"a\"}}\n</tool_call>";
  const Outcome o = run(call, true);
  EXPECT_EQ(o.finish_reason, "tool_calls");
  std::vector<int32_t> expect = bytes(call);
  expect.push_back(299);
  EXPECT_EQ(o.generated.tokens, expect);
  EXPECT_TRUE(o.generated.ended_by_stop_token);
  EXPECT_EQ(o.generated.reasoning, "hm");
  ASSERT_EQ(o.generated.calls.size(), 1u);
  EXPECT_EQ(o.generated.calls[0].name, "read");
  EXPECT_EQ(json::parse(o.generated.calls[0].arguments), json({{"path", "a"}}));
  // Cut by max_tokens: not a reply to replay.
  EXPECT_FALSE(run("partial", false).generated.ended_by_stop_token);
}

}  // namespace
}  // namespace sluice::chat::chat_reply_replay_test
