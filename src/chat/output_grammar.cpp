#include "chat/output_grammar.h"

#include <set>

#include "chat/api_error.h"
#include "chat/chat_syntax.h"
#include "chat/schema_compiler.h"
#include "util/error.h"

namespace sluice::chat {

using nlohmann::json;

namespace {

const json* tool_parameters(const json& tools, const std::string& name, size_t* index) {
  for (size_t i = 0; i < tools.size(); ++i)
    if (tools[i]["function"]["name"] == name) {
      *index = i;
      return tools[i]["function"].contains("parameters") ? &tools[i]["function"]["parameters"] : nullptr;
    }
  return nullptr;
}

}  // namespace

std::shared_ptr<const Grammar> json_schema_grammar(const json& schema, const std::string& param) {
  auto g = std::make_shared<Grammar>();
  SchemaCompiler sc(*g, schema, param);
  const Grammar::Id root = sc.value(schema, param);
  sc.check_expandable(g, root);
  g->set_root(root);
  return g;
}

std::shared_ptr<const Grammar> json_object_grammar() {
  auto g = std::make_shared<Grammar>();
  const json empty = json::object();
  SchemaCompiler sc(*g, empty, "response_format");
  g->set_root(sc.any_object());
  return g;
}

std::shared_ptr<const Grammar> tool_call_grammar(const ReplySyntax& syn, const json& tools,
                                                 const std::vector<std::string>& allowed, bool parallel,
                                                 const std::set<std::string>& strict, int64_t reasoning_bytes) {
  auto g = std::make_shared<Grammar>();
  const ChatSyntax* syntax = find_chat_syntax(syn.name);
  std::vector<Grammar::Id> calls;
  for (const auto& name : allowed) {
    size_t index = 0;
    const json* params = tool_parameters(tools, name, &index);
    const std::string path = fmt::format("tools[{}].function.parameters", index);
    const json empty = json::object();
    SchemaCompiler sc(*g, params ? *params : empty, path, /*lenient=*/!strict.count(name));
    const Grammar::Id args = params ? sc.value(*params, path) : sc.any_object();
    sc.check_expandable(g, args);
    if (!syntax)
      throw ApiError(400, "invalid_request_error", "tool_choice", "",
                     "this model's chat format has no tool-call syntax this server can enforce");
    calls.push_back(syntax->call_grammar(*g, ForcedCall{name, args, params, sc, path}));
  }
  const Grammar::Id one = g->alt(calls);  // (call indices are written as any small non-negative integer)
  const Grammar::Id sep = g->lit(std::string(syntax ? syntax->call_separator : ""));
  const Grammar::Id many = g->repeat(one, 1, parallel && (!syntax || syntax->parallel_calls) ? -1 : 1, sep);
  std::vector<Grammar::Id> root;
  if (syn.starts_in_reasoning) root.push_back(g->seq({g->text(reasoning_bytes), g->lit(syn.think_end)}));
  if (syntax) syntax->surround_calls(*g, syn, many, reasoning_bytes, root);
  else root.push_back(many);
  g->set_root(g->seq(root));
  return g;
}

}  // namespace sluice::chat
