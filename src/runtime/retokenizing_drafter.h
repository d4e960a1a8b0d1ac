// Drafts across tokenizers: any drafter over another model's token ids (a
// ModelDrafter of a small model with its own tokenizer) drafts for the target.
// The target's history becomes text, the text the draft's ids, the draft's
// proposal text again, and that text the target's ids, which the target then
// verifies as usual: output is the plain output whatever the drafts.
//
// Keeping up without re-tokenising everything at each step: the target's text
// is extended by the bytes of its new tokens; the draft's ids are kept for a
// settled prefix of it, which only grows while the target's history does, and
// only the tail after it (the last word, which may still merge with what comes
// next, and an unfinished UTF-8 character) is tokenised again at each call.
// The inner drafter is told which ids are settled (Drafter::propose_after), so
// a draft model keeps their state and feeds the tail again with its proposals.
// A history that departs from the last one (a rejected draft is never part
// of it, but the next turn of a chat may be tokenised differently) drops the
// settled ids past the point where the texts part.
//
// At the boundaries: the target's text may end inside a UTF-8 character (a
// byte-level token); the draft model sees the text before that character and
// its proposal must begin with the held bytes, the rest of the character
// becoming the target's ids for those bytes. The proposal's last word may be
// cut short (" wor" of " world") and its last character unfinished: the
// target's ids stop before the last token that reaches the end of the
// proposal's text (unless it is an added token or the target writes one id
// per byte), and before an unfinished character.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/speculative.h"
#include "runtime/token_text.h"

namespace sluice {

class RetokenizingDrafter : public Drafter {
 public:
  // inner proposes ids of `draft`; target_vocab: the target model's ids (a
  // proposal is cut before any id at or beyond it).
  RetokenizingDrafter(std::shared_ptr<const TokenText> target, std::shared_ptr<const TokenText> draft,
                      std::unique_ptr<Drafter> inner, int64_t target_vocab);
  std::vector<int32_t> propose(const std::vector<int32_t>& history, int64_t max) override;
  bool costs_when_empty() const override { return true; }
  void pause() override { inner_->pause(); }

  // One line: the two models' ids (for --stats and the server's start).
  std::string describe() const;

  // After a call: the target's text, the draft ids of its settled prefix and
  // the history the inner drafter was given (settled ids, then the tail's).
  const std::string& text() const { return text_; }
  const std::vector<int32_t>& settled_ids() const { return settled_; }
  const std::vector<int32_t>& draft_history() const { return hist_; }
  // Draft ids the inner drafter was asked for at the last call.
  int64_t last_ask() const { return last_ask_; }

 private:
  std::shared_ptr<const TokenText> target_, draft_;
  std::unique_ptr<Drafter> inner_;
  int64_t vocab_;
  std::vector<int32_t> seen_;       // the target history of the last call
  std::vector<size_t> seen_end_;    // each token's end in text_
  std::string text_;                // the bytes of seen_
  std::vector<int32_t> settled_;    // draft ids of text_[0, settled_end_.back())
  std::vector<size_t> settled_end_;  // each one's end in text_
  std::vector<int32_t> hist_;       // settled_ and the tail's ids
  int64_t last_ask_ = 0;
};

// Helpers of the boundary handling (exposed for tests).
namespace retokenize {

// Length of the longest prefix of `s` made of whole, well-formed UTF-8 characters.
size_t complete_prefix(std::string_view s);
// Bytes at the end of `s` that begin a well-formed character they do not finish (0-3).
size_t unfinished_tail(std::string_view s);
// Bytes of the UTF-8 character that begins with byte `lead` (1 for a byte that begins none).
size_t char_length(unsigned char lead);
// Where the settled prefix of text[0, limit) may end, at or after `from`:
// before the last whitespace run (the last word, with the space before it,
// may still merge with what follows), or, where a long stretch has none,
// at a character boundary 32 bytes before `limit`.
size_t settle_point(std::string_view text, size_t from, size_t limit);
// The target ids writing `proposal`, the draft's text after the target's
// complete text, where that text is followed by the `held` bytes of an
// unfinished character (0-3 bytes): empty unless `proposal` begins with
// `held` and finishes the character; then the character's remaining bytes
// as the target's ids for them, and the target's tokens of the rest up to its
// last complete character, less the last one when it may still merge with
// what follows. At most `max` ids, each below `vocab`.
std::vector<int32_t> target_ids(const TokenText& target, std::string_view held, std::string_view proposal, int64_t max,
                                int64_t vocab);

}  // namespace retokenize

}  // namespace sluice
