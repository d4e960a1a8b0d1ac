// A family's chat syntax as a plug-in: how its chat template writes tool calls,
// how its replies are read (reasoning, calls) and how a forced call is
// enforced. One file per syntax (chat/syntax_<name>.cpp, the way vLLM keeps a
// tool parser per family); the family table's chat_syntax column
// (format/model_families.def) lists them, and a checkpoint's syntax is the one
// whose markers its chat template (or its tokenizer) has.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_codec.h"
#include "chat/grammar.h"
#include "chat/reply_parser.h"
#include "chat/schema_compiler.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace sluice::chat {

// One tool a reply is forced to call, for the syntax to write its call's grammar.
struct ForcedCall {
  const std::string& name;
  Grammar::Id arguments;            // the arguments as JSON (the parameters' grammar)
  const nlohmann::json* parameters;  // the tool's parameters schema; nullptr: any object
  SchemaCompiler& schema;           // compiles the parameters another way (K3's typed arguments)
  const std::string& path;          // the request field of the parameters, for errors
};

// A syntax whose checkpoints are rendered by sluice itself rather than by
// their Jinja template (Kimi K3's XTML), recognised by its tokenizer's markers.
struct NativeChatFormat {
  std::string_view description = {};  // for the startup line
  // Whether this checkpoint's tokenizer and template (if any) are of this format.
  bool (*recognises)(const text::Tokenizer& tok, const text::ChatTemplate* tmpl) = nullptr;
  // The conversation with the generation prompt, as ids; ApiError(400) when it cannot be written.
  std::vector<int32_t> (*render)(const text::Tokenizer& tok, const nlohmann::json& messages,
                                 const nlohmann::json& tools, const ChatOptions& opts) = nullptr;
  std::string_view end_of_turn = {};  // the special token that ends a reply
};

struct ChatSyntax {
  std::string_view name = {};  // also ReplySyntax::name
  // A chat template that spells this writes calls in this syntax ("": see `native`).
  std::string_view template_marker = {};
  const NativeChatFormat* native = nullptr;
  // What a generation prompt ends with when it opens the reply's reasoning.
  std::string_view reasoning_opener = {};
  ReplySyntax (*reply_syntax)() = nullptr;
  // Adapts the conversation to the template before it renders (tool definitions
  // it has no place for, call arguments in the form it reads). ApiError(400) on
  // a conversation that cannot be adapted.
  void (*prepare_messages)(nlohmann::json& messages, const nlohmann::json& tools, bool template_renders_tools) = nullptr;

  // Forced calls (chat/output_grammar.h): one call of a tool...
  Grammar::Id (*call_grammar)(Grammar& g, const ForcedCall& call) = nullptr;
  // ...between calls, and whether a turn may make more than one...
  std::string_view call_separator = {};
  bool parallel_calls = true;
  // ...and the reply around `calls`, appended to `reply` (which holds the
  // reasoning when the prompt opened it).
  void (*surround_calls)(Grammar& g, const ReplySyntax& syntax, Grammar::Id calls, int64_t reasoning_bytes,
                         std::vector<Grammar::Id>& reply) = nullptr;
};

// The syntaxes of the family table, once each, in its order.
std::span<const ChatSyntax* const> chat_syntaxes();
// The syntax of this name (ReplySyntax::name), or nullptr.
const ChatSyntax* find_chat_syntax(std::string_view name);

// The syntax each row of the family table names: <chat_syntax>_chat_syntax.
#define SLUICE_MODEL_FAMILY(model_type, text_config, experts, tensors, moe_layers, builder, chat_syntax, synth) \
  extern const ChatSyntax chat_syntax##_chat_syntax;
#include "format/model_families.def"

// Helpers the syntaxes share.
// Adds `text` to the conversation's leading system message, or adds one.
void append_system_message(nlohmann::json& messages, const std::string& text);
// A template with a call syntax but no place for tool definitions (DeepSeek-V3's)
// gets them in a system message, with DeepSeek-V3's call syntax (the wording
// every such template has been given so far, whatever its syntax).
void declare_tools_when_template_cannot(nlohmann::json& messages, const nlohmann::json& tools,
                                        bool template_renders_tools);
// A call's index as written by Kimi K2 and K3: 1-3 digits.
Grammar::Id call_index_digits(Grammar& g);

}  // namespace sluice::chat
