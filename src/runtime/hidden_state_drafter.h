// Drafts from the target's own hidden states (K3's DSpark and EAGLE-3
// drafters, model/hidden_draft_model.h): before each proposal it takes the
// rows the target's session captured during its passes since the last one
// (prefill chunks and verification batches: no second pass), after undoing
// what it built from rows the target has since rolled back. It keeps the
// model's state of each of the last few sequences it served (the server's
// conversations in turn). Drafts only change how many passes decoding takes:
// the target verifies every token (runtime/speculative.h).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/hidden_draft_model.h"
#include "runtime/speculative.h"

namespace sluice {

class HiddenStateDrafter : public Drafter {
 public:
  // Keeps the states of up to `sequences` sequences (the least recently served goes first).
  explicit HiddenStateDrafter(std::unique_ptr<HiddenDraftModel> model, size_t sequences = 8)
      : model_(std::move(model)), max_followed_(sequences) {}
  std::vector<int64_t> target_layers() const override { return model_->target_layers(); }
  // Without the target's hidden rows there is nothing to draft from.
  std::vector<int32_t> propose(const std::vector<int32_t>&, int64_t) override { return {}; }
  std::vector<int32_t> propose_for(Session& target, const std::vector<int32_t>& history, int64_t max) override;
  bool costs_when_empty() const override { return true; }
  const HiddenDraftModel& model() const { return *model_; }
  // Target positions whose rows it holds for `target`'s sequence (-1: none followed).
  int64_t positions(const Session& target) const;

 private:
  struct Followed {
    uint64_t capture = 0;  // HiddenCapture::id
    std::unique_ptr<HiddenDraftModel::State> state;
    bool built = false;    // the state holds every position before the capture's start
    uint64_t used = 0;
  };
  std::unique_ptr<HiddenDraftModel> model_;
  size_t max_followed_;
  std::vector<Followed> followed_;
  uint64_t clock_ = 0;
};

}  // namespace sluice
