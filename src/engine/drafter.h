// The drafter a command line asks for (speculative decoding).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "model/model.h"
#include "runtime/speculative.h"

namespace sluice {

// The model in `draft_model_dir` (opened with the default plan) when one is
// given, else n-gram lookup of suffixes of up to `ngram` tokens when
// `speculate`, else none (null).
std::shared_ptr<Drafter> choose_drafter(const std::string& draft_model_dir, bool speculate, int64_t ngram,
                                        const Model& target);

}  // namespace sluice
