#include "engine/drafter.h"

#include <algorithm>

#include "engine/engine.h"
#include "runtime/model_drafter.h"

namespace sluice {

std::shared_ptr<Drafter> choose_drafter(const std::string& draft_model_dir, bool speculate, int64_t ngram,
                                        const Model& target) {
  if (!draft_model_dir.empty())
    return std::make_shared<ModelDrafter>(Engine::open(draft_model_dir), target.info().vocab);
  if (speculate) return std::make_shared<NgramDrafter>(ngram, std::min<int64_t>(2, ngram));
  return nullptr;
}

}  // namespace sluice
