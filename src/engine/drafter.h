// The drafter a command line asks for (speculative decoding).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "model/model.h"
#include "runtime/speculative.h"
#include "runtime/suffix_drafter.h"

namespace sluice {

struct DraftChoice {
  bool speculate = false;   // --speculate
  std::string kind;         // --draft: "ngram" or "suffix" (empty: ngram; either implies speculate)
  std::string model_dir;    // --draft-model
  int64_t ngram = 4;        // longest suffix the n-gram drafter looks up
  SuffixDraftOptions suffix;
};

// Checks the names and values (errors name the option).
void check_draft_choice(const DraftChoice& c);

// The model in `model_dir` (opened with the default plan) when one is given,
// else suffix drafts or n-gram lookup of suffixes of up to `ngram` tokens when
// speculating, else none (null).
std::shared_ptr<Drafter> choose_drafter(const DraftChoice& c, const Model& target);

}  // namespace sluice
