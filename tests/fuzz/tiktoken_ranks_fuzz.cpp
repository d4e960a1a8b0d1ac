// Fuzz target: tiktoken.model rank files (then encode/decode if they load).
#include <cstdint>
#include <string>

#include "text/tiktoken_tokenizer.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    sluice::text::TiktokenOptions o;
    o.pattern = sluice::text::kKimiPattern;
    o.kimi_chunking = true;
    sluice::text::AddedToken eos;
    eos.id = 300;
    eos.content = "<|im_end|>";
    o.specials.push_back(eos);
    sluice::text::TiktokenTokenizer tok(text, "fuzz/tiktoken.model", o);
    for (std::string s : {std::string("Hello world 123 \xE4\xB8\xAD\xE6\x96\x87 <|im_end|>"), std::string("\xFF"),
                          std::string(text.substr(0, 64))}) {
      auto ids = tok.encode(s);
      (void)tok.decode(ids);
    }
  } catch (const sluice::Error&) {
  }
  return 0;
}
