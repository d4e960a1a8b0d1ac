// Kimi K3 "XTML" chat format (docs: ../shared/docs/kimi_k3.md §4, from Moonshot's
// encoding_k3.py as described there). Only <|open|>, <|close|>, <|sep|> and
// <|end_of_msg|> are special tokens; tag names and attributes are ordinary text.
// The renderer produces segments marked trusted (only the four markers, which
// become special ids) or untrusted (tag names, attributes, message content and
// tool text: encoded with encode_ordinary, so special-token strings written
// anywhere in them stay text).
//
// Rendered order: tool declaration (if tools), thinking-effort system message
// (if thinking is on), the messages, then the generation prompt. Points the
// spec leaves open and this code infers (marked [inferred] below): that order,
// 0-based call/result indices, the thinking-off prompt
// `<|open|>message role="assistant"<|sep|><|open|>response<|sep|>`, compact
// JSON for object/array argument values. Not implemented: the "## New Tools
// Available" variant for tools carried by a system message, tool-choice and
// response-format system messages, images.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"

namespace sluice::text {

struct XtmlSegment {
  std::string text;
  bool trusted;  // true: only the markers <|open|> <|close|> <|sep|> <|end_of_msg|> (special ids)
};

struct XtmlOptions {
  bool thinking = true;
  std::string thinking_effort = "max";
  bool add_generation_prompt = true;
};

// messages: OpenAI-style [{role, content, [name], [reasoning_content],
// [tool_calls: [{id, function: {name, arguments (JSON string or object)}}]],
// [tool_call_id]}]; tools: null or [{type: "function", function: {...}}].
std::vector<XtmlSegment> xtml_render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                     const XtmlOptions& opt);
std::string xtml_text(const std::vector<XtmlSegment>& segs);
std::vector<int32_t> xtml_encode(const Tokenizer& tok, const std::vector<XtmlSegment>& segs);

// `&` -> `&amp;`, `"` -> `&quot;` (attribute values)
std::string xtml_escape(const std::string& s);
// The value of attribute `name` in a tag's text (`call tool="x" index="0"`), escapes undone; nullopt if absent.
std::optional<std::string> xtml_attr(std::string_view tag, std::string_view name);

struct XtmlToolCall {
  std::string name;
  std::string arguments;  // JSON object text, keys in generated order
};
struct XtmlReply {
  std::string reasoning, content;
  std::vector<XtmlToolCall> tool_calls;
  bool finished = false;  // reached <|close|>message<|sep|><|end_of_msg|>
};

// Parses generated ids that follow the generation prompt (thinking on: starts
// inside <|open|>think<|sep|>; off: inside <|open|>response<|sep|>). Throws
// sluice::Error on structure that does not follow the format.
XtmlReply xtml_parse_reply(const Tokenizer& tok, const std::vector<int32_t>& ids, bool thinking = true);

// One call as generated text, the markers spelled out (as a streaming decoder
// shows them): what follows `<|open|>call ` up to `<|close|>call<|sep|>`, i.e.
// `tool="NAME" index="K"<|sep|>` then typed arguments or one json block.
// nullopt when it does not follow the format (a key twice, a value that does
// not parse as its type, stray text between arguments).
std::optional<XtmlToolCall> xtml_parse_call_text(std::string_view body);

}  // namespace sluice::text
