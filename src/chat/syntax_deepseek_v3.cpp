// DeepSeek-V3's chat syntax: <｜tool▁calls▁begin｜> around calls written
// <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{..}\n```<｜tool▁call▁end｜>,
// reasoning in <think>...</think>.
#include "chat/chat_syntax.h"

namespace sluice::chat {

ReplySyntax deepseek_v3_syntax() {
  ReplySyntax s;
  s.name = "deepseek_v3";
  s.section_begin = "<｜tool▁calls▁begin｜>";
  s.section_end = "<｜tool▁calls▁end｜>";
  s.call_begin = "<｜tool▁call▁begin｜>";
  s.call_end = "<｜tool▁call▁end｜>";
  s.call_reader = deepseek_v3_call_reader;
  return s;
}

namespace {

Grammar::Id deepseek_v3_call(Grammar& g, const ForcedCall& call) {
  return g.seq({g.lit("<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + call.name + "\n```json\n"), call.arguments,
                g.lit("\n```<｜tool▁call▁end｜>")});
}

void deepseek_v3_reply(Grammar& g, const ReplySyntax&, Grammar::Id calls, int64_t, std::vector<Grammar::Id>& reply) {
  reply.insert(reply.end(), {g.lit("<｜tool▁calls▁begin｜>"), calls, g.lit("<｜tool▁calls▁end｜>")});
}

}  // namespace

const ChatSyntax deepseek_v3_chat_syntax{
    .name = "deepseek_v3",
    .template_marker = "<｜tool▁calls▁begin｜>",
    .reasoning_opener = "<think>",
    .reply_syntax = deepseek_v3_syntax,
    .prepare_messages = declare_tools_when_template_cannot,
    .call_grammar = deepseek_v3_call,
    .surround_calls = deepseek_v3_reply,
};

}  // namespace sluice::chat
