#include "util/json_depth.h"

namespace sluice {

int json_text_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

void check_json_text_depth(std::string_view text, std::string_view what) {
  if (json_text_depth(text) > kMaxJsonDepth)
    throw JsonTooDeep(fmt::format("{} is nested deeper than {} levels (the limit)", what, kMaxJsonDepth));
}

}  // namespace sluice
