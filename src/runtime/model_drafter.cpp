#include "runtime/model_drafter.h"

#include <algorithm>

#include "util/error.h"

namespace sluice {

ModelDrafter::ModelDrafter(std::unique_ptr<Model> draft, int64_t target_vocab)
    : ModelDrafter(*draft, target_vocab) {
  owned_ = std::move(draft);
}

ModelDrafter::ModelDrafter(const Model& draft, int64_t target_vocab) : draft_(draft) {
  if (draft.info().vocab > target_vocab)
    fail("the draft model's vocabulary ({} ids) is larger than the target's ({}): they do not share a tokenizer",
         draft.info().vocab, target_vocab);
}

std::vector<int32_t> ModelDrafter::propose(const std::vector<int32_t>& history, int64_t max) {
  if (max <= 0 || history.empty()) return {};
  // The state holds the history of the previous call (its proposals rolled
  // back), normally a prefix of this one. When they differ (the next turn of a
  // chat re-tokenised, an edited conversation) it goes back to where they
  // agree through the mark it keeps (KV caches drop rows, recurrent state feeds
  // the common part again), or starts over when they agree on less than that.
  if (s_) {
    const auto& have = s_->tokens();
    size_t common = 0;
    while (common < have.size() && common < history.size() && have[common] == history[common]) ++common;
    common = std::min(common, history.size() - 1);  // the last token is fed for its logits
    if (common < mark_at_) {
      s_.reset();
    } else if (common < have.size()) {
      s_->rollback(int64_t(common - mark_at_));
      s_->checkpoint(/*record=*/false);
      mark_at_ = common;
    }
  }
  if (!s_) {
    s_ = std::make_unique<Session>(draft_);
    s_->checkpoint(/*record=*/false);
    mark_at_ = 0;
  }
  const int64_t V = draft_.info().vocab;
  const size_t have = s_->tokens().size();
  // Ids the draft model does not know cannot be continued from.
  for (size_t i = have; i < history.size(); ++i)
    if (history[i] < 0 || history[i] >= V) return {};
  std::vector<float> logits = s_->feed(std::vector<int32_t>(history.begin() + std::ptrdiff_t(have), history.end()));
  s_->checkpoint(/*record=*/false);  // only ever returned to exactly
  std::vector<int32_t> out;
  for (int64_t i = 0; i < max; ++i) {
    out.push_back(argmax(logits.data(), V));
    if (i + 1 < max) logits = s_->feed({out.back()});
  }
  s_->rollback(0);
  return out;
}

}  // namespace sluice
