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
    fail("the draft model's vocabulary ({} ids) is larger than the target's ({}) although they share a tokenizer: "
         "its proposals could name ids the target does not have",
         draft.info().vocab, target_vocab);
}

std::vector<int32_t> ModelDrafter::propose(const std::vector<int32_t>& history, int64_t max) {
  return propose_after(history, history.size(), max);
}

std::vector<int32_t> ModelDrafter::propose_after(const std::vector<int32_t>& history, size_t settled, int64_t max) {
  const bool restart = restart_;
  restart_ = false;
  if (max <= 0 || history.empty()) return {};
  settled = std::min(settled, history.size());
  // What the state may keep: the settled part, less the last token when all
  // of it is settled (that one is fed for its logits).
  const size_t keep = settled == history.size() ? settled - 1 : settled;
  // The state holds the settled part of the previous call's history (the
  // rest and the proposals rolled back) from base_ on, normally a part of
  // this one. When they differ (the next turn of a chat re-tokenised, an
  // edited conversation, text tokenised again) it goes back to where they
  // agree through the mark it keeps (KV caches drop rows, recurrent state
  // feeds the common part again), or starts over when they agree on less
  // than that. After a pause, a state far behind starts over from the last
  // kRestartWindow tokens.
  if (s_) {
    const auto& have = s_->tokens();
    size_t common = 0;  // of s_'s tokens
    while (common < have.size() && base_ + common < history.size() && have[common] == history[base_ + common])
      ++common;
    common = std::min(common, keep >= base_ ? keep - base_ : 0);
    if (keep < base_ || common < mark_at_ || (restart && keep > base_ + common + kRestartWindow)) {
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
    base_ = restart && keep > kRestartWindow ? keep - kRestartWindow : 0;
  }
  // Within the draft model's context (it may be shorter than the target's): fewer proposals, or none.
  const int64_t ctx = draft_.info().max_positions;
  if (ctx > 0) max = std::min<int64_t>(max, ctx - int64_t(history.size() - base_) + 1);  // the last proposal is not fed
  if (max <= 0) return {};
  const int64_t V = draft_.info().vocab;
  const size_t have = base_ + s_->tokens().size();  // history[0, have) is in the state (from base_ on)
  // Ids the draft model does not know cannot be continued from.
  for (size_t i = have; i < history.size(); ++i)
    if (history[i] < 0 || history[i] >= V) return {};
  std::vector<float> logits;
  if (settled > have) {
    logits = s_->feed(std::vector<int32_t>(history.begin() + std::ptrdiff_t(have), history.begin() + std::ptrdiff_t(settled)));
    fed_ += int64_t(settled - have);
  }
  s_->checkpoint(/*record=*/false);  // only ever returned to exactly
  if (settled < history.size()) {
    logits = s_->feed(std::vector<int32_t>(history.begin() + std::ptrdiff_t(settled), history.end()));
    fed_ += int64_t(history.size() - settled);
  }
  std::vector<int32_t> out;
  for (int64_t i = 0; i < max; ++i) {
    out.push_back(argmax(logits.data(), V));
    if (i + 1 < max) {
      logits = s_->feed({out.back()});
      ++fed_;
    }
  }
  s_->rollback(0);
  return out;
}

}  // namespace sluice
