// Kimi K2's chat syntax (also Kimi Linear's): <|tool_calls_section_begin|>
// around calls written <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{..}<|tool_call_end|>,
// reasoning in <think>...</think>.
#include "chat/chat_syntax.h"

namespace sluice::chat {

ReplySyntax kimi_k2_syntax() {
  ReplySyntax s;
  s.name = "kimi_k2";
  s.section_begin = "<|tool_calls_section_begin|>";
  s.section_end = "<|tool_calls_section_end|>";
  s.call_begin = "<|tool_call_begin|>";
  s.call_end = "<|tool_call_end|>";
  s.call_reader = kimi_k2_call_reader;
  return s;
}

namespace {

Grammar::Id kimi_k2_call(Grammar& g, const ForcedCall& call) {
  return g.seq({g.lit("<|tool_call_begin|>functions." + call.name + ":"), call_index_digits(g),
                g.lit("<|tool_call_argument_begin|>"), call.arguments, g.lit("<|tool_call_end|>")});
}

void kimi_k2_reply(Grammar& g, const ReplySyntax&, Grammar::Id calls, int64_t, std::vector<Grammar::Id>& reply) {
  reply.insert(reply.end(), {g.lit("<|tool_calls_section_begin|>"), calls, g.lit("<|tool_calls_section_end|>")});
}

}  // namespace

const ChatSyntax kimi_k2_chat_syntax{
    .name = "kimi_k2",
    .template_marker = "<|tool_calls_section_begin|>",
    .reasoning_opener = "<think>",
    .reply_syntax = kimi_k2_syntax,
    .prepare_messages = declare_tools_when_template_cannot,
    .call_grammar = kimi_k2_call,
    .surround_calls = kimi_k2_reply,
};

}  // namespace sluice::chat
