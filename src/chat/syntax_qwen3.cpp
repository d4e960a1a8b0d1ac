// Qwen3's chat syntax (Hermes-style): <tool_call>\n{"name": .., "arguments": {..}}\n</tool_call>,
// one per call, reasoning in <think>...</think>. Also the syntax of the byte
// codec and of templates that have none of their own (chat/text_codec.cpp).
#include <nlohmann/json.hpp>

#include "chat/chat_syntax.h"

namespace sluice::chat {

ReplySyntax qwen3_syntax() {
  ReplySyntax s;
  s.name = "qwen3";
  s.call_begin = "<tool_call>";
  s.call_end = "</tool_call>";
  s.call_reader = qwen3_call_reader;
  return s;
}

namespace {

Grammar::Id qwen3_call(Grammar& g, const ForcedCall& call) {
  const std::string qname = nlohmann::json(call.name).dump();
  return g.seq({g.lit("<tool_call>\n{\"name\": " + qname + ", \"arguments\": "), call.arguments,
                g.lit("}\n</tool_call>")});
}

// After reasoning the calls come after a blank line.
void qwen3_reply(Grammar& g, const ReplySyntax& syn, Grammar::Id calls, int64_t, std::vector<Grammar::Id>& reply) {
  if (syn.starts_in_reasoning) reply.insert(reply.end(), {g.lit("\n\n"), calls});
  else reply.push_back(calls);
}

}  // namespace

const ChatSyntax qwen3_chat_syntax{
    .name = "qwen3",
    .template_marker = "<tool_call>",
    .reasoning_opener = "<think>",
    .reply_syntax = qwen3_syntax,
    .prepare_messages = declare_tools_when_template_cannot,
    .call_grammar = qwen3_call,
    .call_separator = "\n",
    .surround_calls = qwen3_reply,
};

}  // namespace sluice::chat
