// A small model sharing the target's tokenizer as the drafter: it keeps its
// own state in step with the conversation and proposes its greedy
// continuation. Its quality only affects speed; the target verifies every token.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/session.h"
#include "runtime/speculative.h"

namespace sluice {

class ModelDrafter : public Drafter {
 public:
  // target_vocab: the verifier's vocabulary size; the draft model's must not exceed it
  // (token ids mean the same text in both).
  ModelDrafter(const Model& draft, int64_t target_vocab);
  // The same, owning the draft model.
  ModelDrafter(std::unique_ptr<Model> draft, int64_t target_vocab);
  std::vector<int32_t> propose(const std::vector<int32_t>& history, int64_t max) override;

 private:
  std::unique_ptr<Model> owned_;
  const Model& draft_;
  std::unique_ptr<Session> s_;  // holds a prefix of the last history seen
  size_t mark_at_ = 0;          // tokens before s_'s open mark (where it can go back to)
};

}  // namespace sluice
