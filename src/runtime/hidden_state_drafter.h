// Drafts from the target's own hidden states (K3's DSpark and EAGLE-3
// drafters, model/hidden_draft_model.h): before each proposal it takes the
// rows the target's session captured during its passes since the last one
// (prefill chunks and verification batches: no second pass), after undoing
// what it built from rows the target has since rolled back. Drafts only
// change how many passes decoding takes: the target verifies every token
// (runtime/speculative.h).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/hidden_draft_model.h"
#include "runtime/speculative.h"

namespace sluice {

class HiddenStateDrafter : public Drafter {
 public:
  explicit HiddenStateDrafter(std::unique_ptr<HiddenDraftModel> model) : model_(std::move(model)) {}
  std::vector<int64_t> target_layers() const override { return model_->target_layers(); }
  // Without the target's hidden rows there is nothing to draft from.
  std::vector<int32_t> propose(const std::vector<int32_t>&, int64_t) override { return {}; }
  std::vector<int32_t> propose_for(Session& target, const std::vector<int32_t>& history, int64_t max) override;
  bool costs_when_empty() const override { return true; }
  const HiddenDraftModel& model() const { return *model_; }

 private:
  std::unique_ptr<HiddenDraftModel> model_;
  uint64_t capture_id_ = 0;  // the capture the model's state was built from (HiddenCapture::id)
  bool built_ = false;       // the model holds every position of it before its start
};

}  // namespace sluice
