// Grammars for guaranteed structure (issue 16 item 3): a JSON Schema compiled
// to a grammar (response_format json_schema, tool arguments), any JSON object
// with bounded whitespace (json_object), and "the reply is a call of one of
// these tools" in each family's own call syntax (tool_choice required or a
// named function). ReplyStream samples through them, so every token keeps the
// reply a prefix of the grammar, with or without speculation.
//
// Schemas: type (one or a list), object with properties / required /
// additionalProperties false (properties come in the schema's key order, an
// optional one may be left out; other properties are never written), enum,
// const, array with items / minItems / maxItems, string, number, integer,
// boolean, null, anyOf / oneOf (as alternatives), $ref to #/$defs/... or
// #/definitions/...; annotations (description, title, default, examples,
// $schema, $comment, strict) are ignored. Value checks (minimum, pattern,
// format, allOf...) are not enforced in a forced call of a tool that is not
// strict; any other keyword is a 400 naming it. Whitespace: at most one space
// after ':' and ','.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/grammar.h"
#include "chat/reply_parser.h"

namespace sluice::chat {

// `param`: the request field the schema came from, for errors ("response_format.json_schema.schema").
std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::json& schema, const std::string& param);
std::shared_ptr<const Grammar> json_object_grammar();

// tools: the request's tools ([{type, function: {name, parameters}}]), `allowed`
// the names the reply may call (all of them for "required"). The syntax's name
// picks the call format (its plug-in, chat/chat_syntax.h); a reply that
// starts inside reasoning may reason first (at most `reasoning_bytes`, no '<').
// `strict`: the tools whose schemas are enforced whole; the others' value checks
// (minimum, pattern, format...) are not enforced, only their shape.
std::shared_ptr<const Grammar> tool_call_grammar(const ReplySyntax& syntax, const nlohmann::json& tools,
                                                 const std::vector<std::string>& allowed, bool parallel,
                                                 const std::set<std::string>& strict = {},
                                                 int64_t reasoning_bytes = 2048);

}  // namespace sluice::chat
