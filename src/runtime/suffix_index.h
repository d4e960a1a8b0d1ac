// A suffix automaton over token ids, built online, for drafting: documents
// (a conversation, the recent requests' prompts and replies) are appended one
// after another, each behind a separator no match crosses. It answers "what is
// the longest suffix of the open document that occurred before, and what
// usually followed it" in time independent of the text's length.
//
// Memory is bounded: once the documents hold more than `max_tokens` tokens the
// automaton is rebuilt from the newest documents that fit in 3/4 of it (the
// oldest are dropped; an open document longer than that keeps its tail), so a
// rebuild happens at most once per max_tokens/4 appended tokens.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

namespace sluice {

class SuffixIndex {
 public:
  explicit SuffixIndex(int64_t max_tokens = int64_t(1) << 18);

  // Ends the open document and opens a new, empty one.
  void begin_document();
  // Appends to the open document.
  void append(int32_t token);
  void append(const std::vector<int32_t>& tokens) {
    for (int32_t t : tokens) append(t);
  }

  struct Match {
    int64_t length = 0;  // tokens matched (0: the last token never occurred before)
    int32_t state = 0;   // automaton state of the match (for continuation())
  };
  // The longest suffix of the open document that also ends at an earlier
  // position of any document (the open one included).
  Match longest_match() const;

  // The most frequent continuation of `m`: at each step the token that most
  // often followed the text matched so far, as long as the product of those
  // tokens' frequencies (count of the token / count of all continuations)
  // stays >= min_confidence; at most `max` tokens.
  std::vector<int32_t> continuation(const Match& m, int64_t max, double min_confidence) const;

  int64_t tokens() const { return tokens_; }      // in the documents kept, separators not counted
  int64_t documents() const { return int64_t(docs_.size()); }
  int64_t max_tokens() const { return max_tokens_; }
  int64_t bytes() const;  // held by the automaton and the documents' tokens
  int64_t rebuilds() const { return rebuilds_; }

 private:
  struct State {
    int32_t len, link, occ, first_edge;
  };
  struct Edge {
    int32_t token, target, next;
  };
  int32_t find_edge(int32_t state, int32_t token) const;  // edge index or -1
  void add_edge(int32_t state, int32_t token, int32_t target);
  void extend(int32_t token);
  void grow_table();
  void reset_automaton();
  void rebuild();

  int64_t max_tokens_;
  std::deque<std::vector<int32_t>> docs_;  // oldest first; the last is open
  int64_t tokens_ = 0;
  int64_t rebuilds_ = 0;
  int32_t separators_ = 0;  // separators are -1, -2, ...: each occurs once
  std::vector<State> states_;
  std::vector<Edge> edges_;
  std::vector<uint64_t> keys_;  // open addressing (state, token) -> edge; ~0: empty
  std::vector<int32_t> slots_;
  int32_t last_ = 0;
};

}  // namespace sluice
