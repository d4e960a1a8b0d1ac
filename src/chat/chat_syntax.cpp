#include "chat/chat_syntax.h"

#include <algorithm>

namespace sluice::chat {

std::span<const ChatSyntax* const> chat_syntaxes() {
  static const std::vector<const ChatSyntax*> list = [] {
    // Families may share a syntax (Kimi Linear writes Kimi K2's): each once.
    const ChatSyntax* const rows[] = {
#define SLUICE_MODEL_FAMILY(model_type, text_config, experts, tensors, moe_layers, builder, chat_syntax, synth) \
  &chat_syntax##_chat_syntax,
#include "format/model_families.def"
    };
    std::vector<const ChatSyntax*> unique;
    for (const ChatSyntax* s : rows)
      if (std::find(unique.begin(), unique.end(), s) == unique.end()) unique.push_back(s);
    return unique;
  }();
  return list;
}

const ChatSyntax* find_chat_syntax(std::string_view name) {
  for (const ChatSyntax* s : chat_syntaxes())
    if (s->name == name) return s;
  return nullptr;
}

void append_system_message(nlohmann::json& msgs, const std::string& text) {
  if (!msgs.empty() && msgs[0]["role"] == "system" && msgs[0]["content"].is_string())
    msgs[0]["content"] = msgs[0]["content"].get<std::string>() + "\n\n" + text;
  else
    msgs.insert(msgs.begin(), nlohmann::json{{"role", "system"}, {"content", text}});
}

void declare_tools_when_template_cannot(nlohmann::json& msgs, const nlohmann::json& tools,
                                        bool template_renders_tools) {
  if (!tools.is_array() || tools.empty() || template_renders_tools) return;
  append_system_message(msgs, "## Tools\nYou can call these functions:\n" + tools.dump() +
                                  "\nTo call a function, reply with <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
                                  "function<｜tool▁sep｜>NAME\n```json\nARGUMENTS\n```<｜tool▁call▁end｜>"
                                  "<｜tool▁calls▁end｜>");
}

Grammar::Id call_index_digits(Grammar& g) {
  std::vector<Grammar::Id> digits;
  for (char d = '0'; d <= '9'; ++d) digits.push_back(g.lit(std::string(1, d)));
  return g.repeat(g.alt(digits), 1, 3);
}

}  // namespace sluice::chat
