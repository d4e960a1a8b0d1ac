#include "util/splitmix64.h"
#include "runtime/suffix_index.h"

#include <algorithm>
#include <climits>

namespace sluice {

namespace {
constexpr uint64_t kEmpty = ~uint64_t(0);
// States on a new position's suffix-link path whose occurrence count is
// raised. Longer paths occur only in runs of one repeated token; past this
// many steps the counts of the shortest contexts are left low (they only
// weigh continuations, never decide what is emitted).
constexpr int kCountSteps = 64;

uint64_t key_of(int32_t state, int32_t token) { return (uint64_t(uint32_t(state)) << 32) | uint32_t(token); }
uint64_t mix(uint64_t x) { return splitmix64(x); }
}  // namespace

SuffixIndex::SuffixIndex(int64_t max_tokens) : max_tokens_(std::max<int64_t>(16, max_tokens)) {
  docs_.emplace_back();
  reset_automaton();
}

void SuffixIndex::reset_automaton() {
  states_.clear();
  edges_.clear();
  states_.push_back({0, -1, 0, -1});
  keys_.assign(1024, kEmpty);
  slots_.assign(1024, -1);
  last_ = 0;
}

int32_t SuffixIndex::find_edge(int32_t state, int32_t token) const {
  const uint64_t k = key_of(state, token);
  const size_t mask = keys_.size() - 1;
  for (size_t i = mix(k) & mask;; i = (i + 1) & mask) {
    if (keys_[i] == k) return slots_[i];
    if (keys_[i] == kEmpty) return -1;
  }
}

void SuffixIndex::grow_table() {
  std::vector<uint64_t> keys(keys_.size() * 2, kEmpty);
  std::vector<int32_t> slots(keys.size(), -1);
  const size_t mask = keys.size() - 1;
  for (size_t j = 0; j < keys_.size(); ++j) {
    if (keys_[j] == kEmpty) continue;
    size_t i = mix(keys_[j]) & mask;
    while (keys[i] != kEmpty) i = (i + 1) & mask;
    keys[i] = keys_[j];
    slots[i] = slots_[j];
  }
  keys_.swap(keys);
  slots_.swap(slots);
}

void SuffixIndex::add_edge(int32_t state, int32_t token, int32_t target) {
  if ((edges_.size() + 1) * 2 > keys_.size()) grow_table();
  const int32_t e = int32_t(edges_.size());
  edges_.push_back({token, target, states_[size_t(state)].first_edge});
  states_[size_t(state)].first_edge = e;
  const uint64_t k = key_of(state, token);
  const size_t mask = keys_.size() - 1;
  size_t i = mix(k) & mask;
  while (keys_[i] != kEmpty) i = (i + 1) & mask;
  keys_[i] = k;
  slots_[i] = e;
}

// The standard online construction (one new state per token, a clone when an
// existing state must split), plus occurrence counts along the new suffix path.
void SuffixIndex::extend(int32_t token) {
  const int32_t cur = int32_t(states_.size());
  states_.push_back({states_[size_t(last_)].len + 1, 0, 0, -1});
  int32_t p = last_;
  while (p != -1 && find_edge(p, token) < 0) {
    add_edge(p, token, cur);
    p = states_[size_t(p)].link;
  }
  if (p != -1) {
    const int32_t q = edges_[size_t(find_edge(p, token))].target;
    if (states_[size_t(p)].len + 1 == states_[size_t(q)].len) {
      states_[size_t(cur)].link = q;
    } else {
      const int32_t clone = int32_t(states_.size());
      states_.push_back({states_[size_t(p)].len + 1, states_[size_t(q)].link, states_[size_t(q)].occ, -1});
      // The clone's edges in q's order (the list is newest first: copy it reversed).
      std::vector<int32_t> qe;
      for (int32_t e = states_[size_t(q)].first_edge; e != -1; e = edges_[size_t(e)].next) qe.push_back(e);
      for (auto it = qe.rbegin(); it != qe.rend(); ++it) {
        const Edge copy = edges_[size_t(*it)];
        add_edge(clone, copy.token, copy.target);
      }
      for (int32_t e; p != -1 && (e = find_edge(p, token)) >= 0 && edges_[size_t(e)].target == q;
           p = states_[size_t(p)].link)
        edges_[size_t(e)].target = clone;
      states_[size_t(q)].link = clone;
      states_[size_t(cur)].link = clone;
    }
  }
  last_ = cur;
  int steps = 0;
  for (int32_t v = cur; v > 0 && steps < kCountSteps; v = states_[size_t(v)].link, ++steps) ++states_[size_t(v)].occ;
}

void SuffixIndex::begin_document() {
  if (docs_.back().empty()) return;
  docs_.emplace_back();
  separators_ = separators_ == INT32_MIN + 1 ? -1 : separators_ - 1;
  extend(separators_);
}

void SuffixIndex::append(int32_t token) {
  docs_.back().push_back(token);
  ++tokens_;
  if (tokens_ > max_tokens_) rebuild();
  else extend(token);
}

void SuffixIndex::rebuild() {
  const int64_t keep = max_tokens_ * 3 / 4;
  while (tokens_ > keep && docs_.size() > 1) {
    tokens_ -= int64_t(docs_.front().size());
    docs_.pop_front();
  }
  if (tokens_ > keep) {  // the open document alone: keep its tail
    auto& d = docs_.back();
    d.erase(d.begin(), d.begin() + std::ptrdiff_t(tokens_ - keep));
    tokens_ = keep;
  }
  reset_automaton();
  for (size_t i = 0; i < docs_.size(); ++i) {
    if (i > 0) {
      separators_ = separators_ == INT32_MIN + 1 ? -1 : separators_ - 1;
      extend(separators_);
    }
    for (int32_t t : docs_[i]) extend(t);
  }
  ++rebuilds_;
}

SuffixIndex::Match SuffixIndex::longest_match() const {
  if (last_ == 0) return {};
  const int32_t v = states_[size_t(last_)].link;
  return {states_[size_t(v)].len, v};
}

std::vector<int32_t> SuffixIndex::continuation(const Match& m, int64_t max, double min_confidence) const {
  std::vector<int32_t> out;
  if (m.length <= 0) return out;
  int32_t v = m.state;
  double confidence = 1;
  while (int64_t(out.size()) < max) {
    int64_t total = 0, best_count = 0;
    int32_t best = -1;
    for (int32_t e = states_[size_t(v)].first_edge; e != -1; e = edges_[size_t(e)].next) {
      const int64_t c = states_[size_t(edges_[size_t(e)].target)].occ;
      total += c;
      if (edges_[size_t(e)].token >= 0 && c > best_count) best = e, best_count = c;
    }
    if (best < 0) break;
    confidence *= double(best_count) / double(total);
    if (confidence < min_confidence) break;
    out.push_back(edges_[size_t(best)].token);
    v = edges_[size_t(best)].target;
  }
  return out;
}

int64_t SuffixIndex::bytes() const {
  int64_t b = int64_t(states_.capacity() * sizeof(State) + edges_.capacity() * sizeof(Edge) +
                      keys_.capacity() * sizeof(uint64_t) + slots_.capacity() * sizeof(int32_t));
  for (const auto& d : docs_) b += int64_t(d.capacity() * sizeof(int32_t));
  return b;
}

}  // namespace sluice
