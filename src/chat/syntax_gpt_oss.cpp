// gpt-oss's harmony syntax: reasoning in the analysis channel, the answer in
// the final channel, one call per turn written
// <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{..} and
// ended by the <|call|> stop token.
#include <fmt/format.h>

#include "chat/api_error.h"
#include "chat/chat_syntax.h"
#include "util/json_depth.h"

namespace sluice::chat {

ReplySyntax gpt_oss_syntax() {
  ReplySyntax s;
  s.name = "gpt_oss";
  s.think_begin = "<|channel|>analysis<|message|>";
  s.think_end = "<|end|>";
  // Message headers between the reasoning and the answer, and a preamble's, are not content.
  s.drop_markers = {"<|start|>assistant", "<|channel|>final<|message|>", "<|channel|>commentary<|message|>",
                    "<|channel|>commentary ", "<|end|>"};
  // Both placements of the recipient share this; the call ends where generation
  // stops (<|call|> is a stop token), or at <|call|> when it is shown.
  s.call_begin = "to=functions.";
  s.call_end = "<|call|>";
  s.call_reader = gpt_oss_call_reader;
  return s;
}

namespace {

// Harmony templates read the reasoning of a turn as `thinking` and write a call's
// arguments with tojson, so they get the arguments as an object.
void harmony_messages(nlohmann::json& msgs, const nlohmann::json&, bool) {
  for (auto& m : msgs) {
    if (m.contains("reasoning_content") && !m.contains("thinking")) m["thinking"] = m["reasoning_content"];
    if (!m.contains("tool_calls")) continue;
    for (auto& c : m["tool_calls"]) {
      auto& a = c["function"]["arguments"];
      if (!a.is_string()) continue;
      // Parsed without limit, the object would be copied and walked recursively (issue 38).
      if (json_text_depth(a.get<std::string>()) > kMaxJsonDepth)
        throw ApiError(400, "invalid_request_error", "messages", "",
                       fmt::format("a tool call's arguments are nested deeper than {} levels (the limit)",
                                   kMaxJsonDepth));
      auto parsed = nlohmann::json::parse(a.get<std::string>(), nullptr, false);
      if (parsed.is_object()) a = std::move(parsed);
    }
  }
}

// (the <|call|> stop token follows, once the arguments are complete)
Grammar::Id harmony_call(Grammar& g, const ForcedCall& call) {
  return g.seq({g.lit("<|channel|>commentary to=functions." + call.name + " <|constrain|>json<|message|>"),
                call.arguments});
}

// Reasoning in the analysis channel may come first; the call is the next message.
void harmony_reply(Grammar& g, const ReplySyntax& syn, Grammar::Id calls, int64_t reasoning_bytes,
                   std::vector<Grammar::Id>& reply) {
  const Grammar::Id next = g.lit("<|start|>assistant");
  if (syn.starts_in_reasoning)
    reply.push_back(next);
  else
    reply.push_back(g.alt({g.seq({g.lit(syn.think_begin), g.text(reasoning_bytes), g.lit(syn.think_end), next}),
                           g.lit("")}));
  reply.push_back(calls);
}

}  // namespace

const ChatSyntax gpt_oss_chat_syntax{
    .name = "gpt_oss",
    .template_marker = "<|channel|>",
    .reasoning_opener = "<|channel|>analysis<|message|>",
    .reply_syntax = gpt_oss_syntax,
    .prepare_messages = harmony_messages,
    .call_grammar = harmony_call,
    .parallel_calls = false,  // harmony calls one tool per turn
    .surround_calls = harmony_reply,
};

}  // namespace sluice::chat
