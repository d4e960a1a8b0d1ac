// A small model as the drafter: it keeps its own state in step with the
// conversation and proposes its greedy continuation. Its quality only affects
// speed; the target verifies every token. Its ids are the target's when they
// share a tokenizer; with another tokenizer it drafts through
// runtime/retokenizing_drafter.h, which hands it the history in its own ids.
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
  // target_vocab: the ids of the history it is given (the verifier's vocabulary
  // when they share a tokenizer); the draft model's must not exceed it.
  ModelDrafter(const Model& draft, int64_t target_vocab);
  // The same, owning the draft model.
  ModelDrafter(std::unique_ptr<Model> draft, int64_t target_vocab);
  std::vector<int32_t> propose(const std::vector<int32_t>& history, int64_t max) override;
  bool costs_when_empty() const override { return true; }
  // The state keeps history[0, settled); the rest is fed with the proposals and rolled back with them.
  std::vector<int32_t> propose_after(const std::vector<int32_t>& history, size_t settled, int64_t max) override;
  // Tokens fed to the draft model in all, starting over included (a rollback
  // that recurrent state replays from its mark is not counted).
  int64_t fed() const { return fed_; }
  // Drafting paused: the next proposal, if more than kRestartWindow tokens
  // behind, starts a new state from the last kRestartWindow settled tokens
  // instead of feeding every token decoded while paused (the drafts see less
  // context, the output is the same: the target verifies them).
  void pause() override { restart_ = true; }
  static constexpr size_t kRestartWindow = 64;
  // Where in the history the state's tokens begin (0 unless restarted after a pause).
  size_t state_start() const { return base_; }

 private:
  std::unique_ptr<Model> owned_;
  const Model& draft_;
  std::unique_ptr<Session> s_;  // holds history[base_, ...), a part of the settled part of the last history seen
  size_t base_ = 0;             // where s_'s first token is in the history
  size_t mark_at_ = 0;          // s_'s tokens before its open mark (where it can go back to)
  bool restart_ = false;        // paused since the last proposal
  int64_t fed_ = 0;
};

}  // namespace sluice
