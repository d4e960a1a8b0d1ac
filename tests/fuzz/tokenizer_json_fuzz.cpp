// Fuzz target: tokenizer.json parsing (then encode/decode if it loads).
// Input: the tokenizer.json text; errors must be sluice::Error, never a crash.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "text/hf_tokenizer.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    sluice::text::HfTokenizer tok(text, "fuzz/tokenizer.json", nlohmann::json::object());
    for (std::string s : {std::string("Hello world 123 \xE4\xB8\xAD\xF0\x9F\x98\x80 <|end|>"), std::string("\xFF\xC3"),
                          std::string(text.substr(0, 64))}) {
      auto ids = tok.encode(s);
      std::string back = tok.decode(ids);
      (void)back;
    }
  } catch (const sluice::Error&) {
  }
  return 0;
}
