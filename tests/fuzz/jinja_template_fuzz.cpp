// Fuzz target: the Jinja lexer, parser and interpreter on arbitrary templates,
// rendered with a small chat-like context.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "text/jinja.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::json ctx = nlohmann::json::parse(R"({
    "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi <b>"},
                 {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
                   "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
                 {"role": "tool", "content": "42"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "n": 3})");
  std::string src(reinterpret_cast<const char*>(data), size);
  try {
    sluice::text::jinja::Template t(src);
    std::string out = t.render(ctx);
    (void)out;
  } catch (const sluice::Error&) {
  }
  return 0;
}
