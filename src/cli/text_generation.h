// Generation with text out, shared by generate --prompt, run and chat:
// greedy or n-gram speculative decoding, streaming decoded text as tokens
// arrive (partial UTF-8 held back), stopping at the model's stop ids.
#pragma once
#include <cstdio>
#include <vector>

#include "runtime/session.h"
#include "runtime/speculative.h"
#include "text/tokenizer.h"

namespace sluice::cli {

struct TextGenOptions {
  int64_t max_new = 256;
  bool ignore_eos = false;
  bool speculate = false;
  int64_t draft_max = 8;
  bool stats = false;  // speculation / expert statistics to stderr
};

// Returns the generated ids, stop token excluded.
std::vector<int32_t> stream_text(Session& s, const text::Tokenizer& tok, const std::vector<int32_t>& prompt,
                                 const TextGenOptions& o, std::FILE* out);

// Text -> ids, checking that the tokenizer fits the model.
std::vector<int32_t> encode_prompt(const text::Tokenizer& tok, const Model& model, const std::string& text);

}  // namespace sluice::cli
