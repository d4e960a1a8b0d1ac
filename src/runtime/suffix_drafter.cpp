#include "runtime/suffix_drafter.h"

#include <algorithm>

namespace sluice {

SuffixDrafter::SuffixDrafter(const SuffixDraftOptions& o) : o_(o), index_(o.max_tokens) {}

void SuffixDrafter::follow(const std::vector<int32_t>& h) {
  const size_t have = conversation_.size();
  size_t common = 0;
  if (h.size() >= have && std::equal(conversation_.begin(), conversation_.end(), h.begin())) {
    common = have;
  } else {
    common = size_t(std::mismatch(conversation_.begin(), conversation_.end(), h.begin(), h.end()).first -
                    conversation_.begin());
    index_.begin_document();
    const size_t from = common > size_t(o_.overlap) ? common - size_t(o_.overlap) : 0;
    for (size_t i = from; i < common; ++i) index_.append(h[i]);
  }
  for (size_t i = common; i < h.size(); ++i) index_.append(h[i]);
  conversation_.resize(common);
  conversation_.insert(conversation_.end(), h.begin() + std::ptrdiff_t(common), h.end());
}

std::vector<int32_t> SuffixDrafter::propose(const std::vector<int32_t>& history, int64_t max) {
  std::lock_guard lock(mu_);
  follow(history);
  if (max <= 0) return {};
  const SuffixIndex::Match m = index_.longest_match();
  if (m.length < o_.min_match) return {};
  return index_.continuation(m, std::min(max, m.length), o_.min_confidence);
}

DraftIndexSize SuffixDrafter::index_size() const {
  std::lock_guard lock(mu_);
  return {index_.tokens(), index_.bytes(), index_.documents(), index_.max_tokens()};
}

}  // namespace sluice
