#include "engine/drafter.h"

#include <algorithm>

#include "engine/engine.h"
#include "runtime/model_drafter.h"
#include "util/error.h"

namespace sluice {

void check_draft_choice(const DraftChoice& c) {
  if (!c.kind.empty() && c.kind != "ngram" && c.kind != "suffix")
    fail("--draft must be ngram or suffix, got '{}'", c.kind);
  if (!c.kind.empty() && !c.model_dir.empty())
    fail("--draft {} and --draft-model are two drafters: give one of them", c.kind);
  if (c.ngram < 1) fail("--ngram must be >= 1, got {}", c.ngram);
  if (c.suffix.max_tokens < 1024) fail("--suffix-tokens must be >= 1024, got {}", c.suffix.max_tokens);
}

std::shared_ptr<Drafter> choose_drafter(const DraftChoice& c, const Model& target) {
  if (!c.model_dir.empty())
    return std::make_shared<ModelDrafter>(Engine::open(c.model_dir), target.info().vocab);
  if (c.kind == "suffix") return std::make_shared<SuffixDrafter>(c.suffix);
  if (c.speculate || c.kind == "ngram") return std::make_shared<NgramDrafter>(c.ngram, std::min<int64_t>(2, c.ngram));
  return nullptr;
}

}  // namespace sluice
