// Suffix drafts: a suffix index (runtime/suffix_index.h) over the
// conversation and, kept across requests, the recent requests' prompts and
// outputs (coding agents re-send their history and re-quote tool outputs,
// files and code). The draft is the most frequent continuation of the longest
// suffix of the text so far that occurred before, at most as many tokens as
// that suffix is long and only while the continuation's frequency stays high:
// long matches (a re-quoted file) give long drafts, short ones short drafts.
//
// The index follows one conversation at a time: a history that extends the
// last one appends its new tokens; one that departs from it (the next request)
// opens a new document holding the new history from a few tokens before the
// point of departure (what was already indexed is not indexed again). Memory
// is bounded by the index's token cap (oldest documents evicted). Calls are
// serialised by a mutex; index_size() may be read from any thread.
#pragma once
#include <cstdint>
#include <mutex>
#include <vector>

#include "runtime/speculative.h"
#include "runtime/suffix_index.h"

namespace sluice {

struct SuffixDraftOptions {
  int64_t max_tokens = int64_t(1) << 18;  // tokens indexed at most (about 100-150 bytes each)
  int64_t min_match = 2;                  // shortest matched suffix that is continued
  double min_confidence = 0.3;            // product of the continuation's frequencies, at least
  int64_t overlap = 32;                   // tokens before a point of departure indexed again as context
};

class SuffixDrafter : public Drafter {
 public:
  explicit SuffixDrafter(const SuffixDraftOptions& o = {});
  std::vector<int32_t> propose(const std::vector<int32_t>& history, int64_t max) override;
  DraftIndexSize index_size() const override;

 private:
  void follow(const std::vector<int32_t>& history);

  SuffixDraftOptions o_;
  mutable std::mutex mu_;
  SuffixIndex index_;
  std::vector<int32_t> conversation_;  // the history the open document follows
};

}  // namespace sluice
