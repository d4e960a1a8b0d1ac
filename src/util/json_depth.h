// One bound on JSON nesting wherever untrusted JSON meets recursion: the
// request body's parse, a tool call's arguments (a string parsed again), a
// reply's parsed call, and every renderer that walks a value (the XTML writer,
// the template engine's tojson). The JSON library parses without recursing but
// serialises, copies and compares recursively, so a value nested 100,000 deep
// overflows the stack; nothing past kMaxJsonDepth is parsed or rendered.
#pragma once
#include <cstddef>
#include <string_view>
#include <vector>

#include "util/error.h"

namespace sluice {

// Objects and arrays inside one another, counted from 1 at the outermost.
inline constexpr int kMaxJsonDepth = 64;

class JsonTooDeep : public Error {
 public:
  explicit JsonTooDeep(const std::string& what) : Error(what) {}
};

// The deepest nesting of [ and { outside strings in JSON text (text that is not
// JSON gets some count; a parser rejects it afterwards). Linear, no allocation.
int json_text_depth(std::string_view text);

// Throws JsonTooDeep "WHAT is nested deeper than 64 levels (the limit)" when
// the text's nesting passes kMaxJsonDepth; call it before parsing untrusted text.
void check_json_text_depth(std::string_view text, std::string_view what);

// Whether a parsed value (nlohmann::json or ordered_json) nests deeper than
// `limit`, walked with a stack of its own (never recursion).
template <typename J>
bool json_deeper_than(const J& j, int limit) {
  std::vector<std::pair<const J*, int>> todo{{&j, 1}};
  while (!todo.empty()) {
    auto [v, d] = todo.back();
    todo.pop_back();
    if (!v->is_structured()) continue;
    if (d > limit) return true;
    for (const auto& e : *v) todo.push_back({&e, d + 1});
  }
  return false;
}

// Throws JsonTooDeep naming WHAT when a value nests deeper than kMaxJsonDepth.
template <typename J>
void check_json_depth(const J& j, std::string_view what) {
  if (json_deeper_than(j, kMaxJsonDepth))
    throw JsonTooDeep(fmt::format("{} is nested deeper than {} levels (the limit)", what, kMaxJsonDepth));
}

}  // namespace sluice
