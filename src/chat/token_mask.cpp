#include "chat/token_mask.h"

#include <algorithm>
#include <numeric>

namespace sluice::chat {

VocabByBytes::VocabByBytes(const ChatCodec& codec, int64_t vocab) : vocab_(vocab) {
  std::vector<std::string> bytes(static_cast<size_t>(vocab));
  for (int64_t t = 0; t < vocab; ++t) bytes[size_t(t)] = codec.token_bytes(int32_t(t));
  ids_.resize(size_t(vocab));
  std::iota(ids_.begin(), ids_.end(), 0);
  std::stable_sort(ids_.begin(), ids_.end(), [&](int32_t a, int32_t b) { return bytes[size_t(a)] < bytes[size_t(b)]; });
  bytes_.reserve(size_t(vocab));
  for (int32_t id : ids_) {
    max_bytes_ = std::max(max_bytes_, bytes[size_t(id)].size());
    bytes_.push_back(std::move(bytes[size_t(id)]));
  }
}

std::shared_ptr<const VocabByBytes> VocabByBytes::of(const ChatCodec& codec, int64_t vocab) {
  // Kept for the process (the last few codecs and sizes): building one sorts the
  // vocabulary (124 ms for gpt-oss's 200k ids), more than most masked steps cost.
  // A codec's address may be reused by another after it is gone, so an entry is
  // taken only if a sample of its tokens still has the same bytes.
  static std::mutex mu;
  static std::vector<std::pair<const ChatCodec*, std::shared_ptr<const VocabByBytes>>> cache;  // newest last
  constexpr size_t kKept = 4;
  const std::lock_guard<std::mutex> lock(mu);
  for (size_t k = 0; k < cache.size(); ++k) {
    const auto& [who, p] = cache[k];
    if (who != &codec || p->vocab_ != vocab) continue;
    bool same = true;
    for (size_t i = 0; i < p->ids_.size() && same; i += std::max<size_t>(1, p->ids_.size() / 64))
      same = codec.token_bytes(p->ids_[i]) == p->bytes_[i];
    auto found = p;
    cache.erase(cache.begin() + std::ptrdiff_t(k));
    if (!same) break;
    cache.emplace_back(&codec, found);
    return found;
  }
  auto p = std::make_shared<const VocabByBytes>(codec, vocab);
  cache.emplace_back(&codec, p);
  if (cache.size() > kKept) cache.erase(cache.begin());
  return p;
}

std::vector<char> VocabByBytes::allowed(const GrammarCursor& cursor) const {
  std::vector<char> out(static_cast<size_t>(vocab_), 0);
  // after[d]: the cursor after a (d + 1)-byte prefix, its buffers reused; reserved
  // whole so that a deeper level's emplace_back never moves the cursor a caller walks from.
  std::vector<GrammarCursor> after;
  after.reserve(max_bytes_ + 1);
  if (!cursor.dead()) walk(cursor, 0, bytes_.size(), 0, after, out);
  return out;
}

// Tokens [lo, hi) share their first `depth` bytes, which `c` has taken.
void VocabByBytes::walk(const GrammarCursor& c, size_t lo, size_t hi, size_t depth, std::vector<GrammarCursor>& after,
                        std::vector<char>& out) const {
  size_t i = lo;
  for (; i < hi && bytes_[i].size() == depth; ++i)  // these end here (sorted first)
    if (depth > 0) out[size_t(ids_[i])] = 1;
  if (i < hi && after.size() <= depth) after.emplace_back(c.grammar(), GrammarCursor::Empty{});
  while (i < hi) {
    const char b = bytes_[i][depth];
    size_t j = i + 1;
    while (j < hi && bytes_[j][depth] == b) ++j;
    if (c.advance_into(static_cast<unsigned char>(b), after[depth])) walk(after[depth], i, j, depth + 1, after, out);
    i = j;
  }
}

}  // namespace sluice::chat
