// The drafter a command line asks for (speculative decoding).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "model/model.h"
#include "runtime/speculative.h"
#include "runtime/suffix_drafter.h"
#include "runtime/token_text.h"

namespace sluice {

struct DraftChoice {
  bool speculate = false;   // --speculate
  std::string kind;         // --draft: "ngram" or "suffix" (empty: ngram; either implies speculate)
  std::string model_dir;    // --draft-model
  bool retokenize = false;  // --draft-retokenize: through text even when the draft model shares the tokenizer
  int64_t ngram = 4;        // longest suffix the n-gram drafter looks up
  SuffixDraftOptions suffix;
};

// Checks the names and values (errors name the option).
void check_draft_choice(const DraftChoice& c);

// The model in `model_dir` (opened with the default plan) when one is given,
// else suffix drafts or n-gram lookup of suffixes of up to `ngram` tokens when
// speculating, else none (null). A draft model with the target's tokenizer
// proposes the target's ids; one with another tokenizer drafts through text
// (runtime/retokenizing_drafter.h). `target` must be an Engine (its directory
// holds the tokenizer), or give the directory.
std::shared_ptr<Drafter> choose_drafter(const DraftChoice& c, const Model& target);
std::shared_ptr<Drafter> choose_drafter(const DraftChoice& c, const Model& target, const std::string& target_dir);

// The text of a model directory's ids: its tokenizer files (tokenizer.json or
// tiktoken.model), else the byte-level codec, which needs at least 256 ids
// (model_vocab: the model's; an error says why a directory has no text).
std::shared_ptr<const TokenText> model_token_text(const std::string& model_dir, int64_t model_vocab);
// Whether two model directories' ids write the same text: both without
// tokenizer files (byte-level ids), or tokenizers with the same bytes for
// every id and the same added tokens.
bool same_token_text(const std::string& a_dir, const std::string& b_dir);

}  // namespace sluice
