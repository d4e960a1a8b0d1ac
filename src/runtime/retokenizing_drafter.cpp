#include "runtime/retokenizing_drafter.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace sluice {

namespace retokenize {
namespace {

// The well-formed UTF-8 character at s[i]: its length; 0 when s ends before
// it is complete but its bytes so far are well-formed; -1 when ill-formed.
int char_at(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return (unsigned char)s[i + k]; };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  const int n = int(char_length(c));
  if (n == 1) return -1;  // a continuation byte or C0, C1, F5-FF
  // The second byte's range depends on the first (no overlongs, surrogates or code points past U+10FFFF).
  unsigned char lo = 0x80, hi = 0xBF;
  if (c == 0xE0) lo = 0xA0;
  if (c == 0xED) hi = 0x9F;
  if (c == 0xF0) lo = 0x90;
  if (c == 0xF4) hi = 0x8F;
  for (int k = 1; k < n; ++k) {
    if (i + size_t(k) >= s.size()) return 0;
    const unsigned char x = b(size_t(k));
    if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) return -1;
  }
  return n;
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

size_t char_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 1;
}

size_t unfinished_tail(std::string_view s) {
  for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
    const size_t i = s.size() - back;
    const unsigned char c = (unsigned char)s[i];
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    return char_at(s, i) == 0 ? back : 0;
  }
  return 0;
}

size_t complete_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const int n = char_at(s, i);
    if (n <= 0) break;
    i += size_t(n);
  }
  return i;
}

size_t settle_point(std::string_view text, size_t from, size_t limit) {
  constexpr size_t kLongestWord = 64, kBack = 32;
  if (limit <= from) return from;
  size_t i = limit;
  while (i > from && !is_space(text[i - 1])) --i;  // over the last word
  if (i > from) {
    while (i > from && is_space(text[i - 1])) --i;  // to the start of the whitespace before it
    if (limit - i <= kLongestWord) return i;
  }
  if (limit - from <= kBack) return from;
  size_t p = limit - kBack;
  while (p > from && ((unsigned char)text[p] & 0xC0) == 0x80) --p;
  return p;
}

std::vector<int32_t> target_ids(const TokenText& target, std::string_view held, std::string_view proposal, int64_t max,
                                int64_t vocab) {
  std::vector<int32_t> out;
  if (max <= 0 || proposal.substr(0, held.size()) != held) return out;
  auto add = [&](int32_t id) {
    if (id < 0 || id >= vocab || int64_t(out.size()) >= max) return false;
    out.push_back(id);
    return true;
  };
  size_t pos = 0;
  if (!held.empty()) {
    // The rest of the character the target's text ends inside, as the target's ids for those bytes.
    const size_t n = char_length((unsigned char)held[0]);
    if (proposal.size() < n || char_at(proposal.substr(0, n), 0) != int(n)) return out;
    const std::string_view rest = proposal.substr(held.size(), n - held.size());
    if (auto id = target.id_of(rest)) {
      if (!add(*id)) return out;
    } else {
      for (size_t k = 0; k < rest.size(); ++k) {
        auto one = target.id_of(rest.substr(k, 1));
        if (!one || !add(*one)) return out;
      }
    }
    pos = n;
  }
  std::string_view rest = proposal.substr(pos);
  // A tokenizer reads text (an unfinished or ill-formed character would become U+FFFD); one id per byte takes any.
  if (target.merges()) rest = rest.substr(0, complete_prefix(rest));
  if (rest.empty()) return out;
  const std::vector<int32_t> ids = target.encode(rest);
  std::vector<int32_t> mine;
  size_t at = 0;
  for (int32_t id : ids) {
    const std::string b = target.bytes(id);
    if (b.empty() || rest.substr(at, b.size()) != b) break;  // the ids no longer write the text (normalised?)
    at += b.size();
    mine.push_back(id);
  }
  // The last token may be the start of a longer one (" wor" of " world").
  if (!mine.empty() && at == rest.size() && target.merges() && !target.is_added(mine.back())) mine.pop_back();
  for (int32_t id : mine)
    if (!add(id)) break;
  return out;
}

}  // namespace retokenize

std::vector<int32_t> ByteTokenText::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(int32_t(c));
  return ids;
}

std::string ByteTokenText::bytes(int32_t id) const {
  if (id >= 0 && id < 256) return std::string(1, char(id));
  return {};
}

std::optional<int32_t> ByteTokenText::id_of(std::string_view bytes) const {
  if (bytes.size() == 1) return int32_t((unsigned char)bytes[0]);
  return std::nullopt;
}

RetokenizingDrafter::RetokenizingDrafter(std::shared_ptr<const TokenText> target, std::shared_ptr<const TokenText> draft,
                                         std::unique_ptr<Drafter> inner, int64_t target_vocab)
    : target_(std::move(target)), draft_(std::move(draft)), inner_(std::move(inner)), vocab_(target_vocab) {
  if (!target_ || !draft_ || !inner_) fail("internal: RetokenizingDrafter needs both texts and an inner drafter");
}

std::string RetokenizingDrafter::describe() const {
  return "drafts through text: the target's ids are those of its " + target_->describe() + ", the draft model's of its " +
         draft_->describe();
}

std::vector<int32_t> RetokenizingDrafter::propose(const std::vector<int32_t>& history, int64_t max) {
  last_ask_ = 0;
  if (max <= 0 || history.empty()) return {};
  // The target's text: the bytes of the part of the history the last call saw too, then the new tokens'.
  const size_t common =
      size_t(std::mismatch(seen_.begin(), seen_.end(), history.begin(), history.end()).first - seen_.begin());
  seen_.resize(common);
  seen_end_.resize(common);
  const size_t same = common ? seen_end_.back() : 0;  // bytes of text the last call saw too
  text_.resize(same);
  for (size_t i = common; i < history.size(); ++i) {
    seen_.push_back(history[i]);
    text_ += target_->bytes(history[i]);
    seen_end_.push_back(text_.size());
  }
  // The draft model reads whole characters: an unfinished one at the end is held back.
  const size_t held = retokenize::unfinished_tail(text_);
  const size_t limit = text_.size() - held;
  // Settled ids over text that changed (or is held back) go.
  while (!settled_end_.empty() && settled_end_.back() > std::min(same, limit)) {
    settled_.pop_back();
    settled_end_.pop_back();
  }
  const size_t from = settled_end_.empty() ? 0 : settled_end_.back();
  const size_t settle = retokenize::settle_point(text_, from, limit);
  if (settle > from) {
    const std::vector<int32_t> ids = draft_->encode(std::string_view(text_).substr(from, settle - from));
    size_t at = from;
    const size_t first = settled_end_.size();
    for (int32_t id : ids) {
      at += draft_->bytes(id).size();
      settled_.push_back(id);
      settled_end_.push_back(at);
    }
    // Ids that do not write the text byte for byte (ill-formed bytes became U+FFFD) end together.
    if (at != settle)
      for (size_t i = first; i < settled_end_.size(); ++i) settled_end_[i] = settle;
  }
  hist_ = settled_;
  if (limit > settle) {
    const std::vector<int32_t> tail = draft_->encode(std::string_view(text_).substr(settle, limit - settle));
    hist_.insert(hist_.end(), tail.begin(), tail.end());
  }
  if (hist_.empty()) return {};
  // Draft ids enough for `max` target tokens (from the bytes each holds on average), and one that may be cut.
  const double target_bytes = double(std::max<size_t>(1, text_.size())) / double(seen_.size());
  const double draft_bytes = double(std::max<size_t>(1, limit)) / double(hist_.size());
  last_ask_ = std::clamp<int64_t>(int64_t(std::ceil(double(max) * target_bytes / draft_bytes)) + 1, 1, 4 * max + 4);
  const std::vector<int32_t> proposal = inner_->propose_after(hist_, settled_.size(), last_ask_);
  if (proposal.empty()) return {};
  std::string p;
  for (int32_t id : proposal) p += draft_->bytes(id);
  return retokenize::target_ids(*target_, std::string_view(text_).substr(limit), p, max, vocab_);
}

}  // namespace sluice
