#include "text/bpe.h"

#include <algorithm>

namespace sluice::text {

namespace {
inline uint64_t pair_key(int32_t l, int32_t r) { return (uint64_t(uint32_t(l)) << 32) | uint32_t(r); }
inline size_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return size_t(k);
}
}  // namespace

BpeMerger::BpeMerger() {
  byte_id_.fill(-1);
  slots_.assign(1024, Slot{kEmpty, 0, 0});
}

void BpeMerger::grow() {
  std::vector<Slot> old(slots_.size() * 2, Slot{kEmpty, 0, 0});
  old.swap(slots_);
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.key == kEmpty) continue;
    size_t i = mix(s.key) & mask;
    while (slots_[i].key != kEmpty) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

bool BpeMerger::add_merge(int32_t left, int32_t right, uint32_t rank, int32_t merged) {
  if ((count_ + 1) * 2 > slots_.size()) grow();
  const uint64_t key = pair_key(left, right);
  const size_t mask = slots_.size() - 1;
  size_t i = mix(key) & mask;
  while (slots_[i].key != kEmpty) {
    if (slots_[i].key == key) return false;
    i = (i + 1) & mask;
  }
  slots_[i] = Slot{key, rank, merged};
  ++count_;
  return true;
}

const BpeMerger::Slot* BpeMerger::find(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  const size_t mask = slots_.size() - 1;
  size_t i = mix(key) & mask;
  while (true) {
    const Slot& s = slots_[i];
    if (s.key == key) return &s;
    if (s.key == kEmpty) return nullptr;
    i = (i + 1) & mask;
  }
}

void BpeMerger::encode(std::string_view piece, std::vector<int32_t>& out) const {
  const size_t n = piece.size();
  if (n == 0) return;
  if (n == 1) {
    out.push_back(byte_id_[uint8_t(piece[0])]);
    return;
  }
  struct Cand {
    uint32_t rank;
    uint32_t pos;  // byte offset of the left symbol: the leftmost wins ties
    int32_t left_id, right_id, merged;
  };
  thread_local std::vector<int32_t> id, next, prev;
  thread_local std::vector<Cand> heap;
  id.resize(n);
  next.resize(n);
  prev.resize(n);
  heap.clear();
  for (size_t i = 0; i < n; ++i) {
    id[i] = byte_id_[uint8_t(piece[i])];
    next[i] = i + 1 < n ? int32_t(i + 1) : -1;
    prev[i] = int32_t(i) - 1;
  }
  auto worse = [](const Cand& a, const Cand& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; };
  auto consider = [&](int32_t l) {
    if (l < 0) return;
    int32_t r = next[l];
    if (r < 0) return;
    if (const Slot* s = find(id[l], id[r])) {
      heap.push_back(Cand{s->rank, uint32_t(l), id[l], id[r], s->merged});
      std::push_heap(heap.begin(), heap.end(), worse);
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(int32_t(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    Cand c = heap.back();
    heap.pop_back();
    const int32_t l = int32_t(c.pos), r = next[l];
    // stale if the left symbol was absorbed (prev link broken) or either side changed
    if (r < 0 || id[l] != c.left_id || id[r] != c.right_id) continue;
    if (l > 0 && prev[l] >= 0 && next[prev[l]] != l) continue;
    id[l] = c.merged;
    next[l] = next[r];
    if (next[r] >= 0) prev[next[r]] = l;
    id[r] = -1;
    consider(prev[l]);
    consider(l);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

bool PieceCache::lookup(std::string_view piece, std::vector<int32_t>& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(std::string(piece));
  if (it == map_.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void PieceCache::store(std::string_view piece, const int32_t* ids, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  if (map_.size() >= max_entries_) map_.clear();
  map_.emplace(std::string(piece), std::vector<int32_t>(ids, ids + n));
}

}  // namespace sluice::text

namespace sluice::text {

bool ByteBpe::add_token(int32_t id, std::string bytes) {
  if (id < 0) return false;
  if (size_t(id) >= tokens_.size()) {
    tokens_.resize(size_t(id) + 1);
    present_.resize(size_t(id) + 1, false);
  }
  if (present_[size_t(id)]) return false;
  tokens_[size_t(id)] = std::move(bytes);
  present_[size_t(id)] = true;
  return true;
}

std::string ByteBpe::finish_vocab() {
  index_.clear();
  index_.reserve(tokens_.size() * 2);
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (present_[i]) index_.emplace(std::string_view(tokens_[i]), int32_t(i));  // first id wins on duplicates
  std::string missing;
  for (int b = 0; b < 256; ++b) {
    char c = char(b);
    auto it = index_.find(std::string_view(&c, 1));
    if (it == index_.end())
      missing += c;
    else
      merger_.set_byte(uint8_t(b), it->second);
  }
  return missing;
}

std::optional<int32_t> ByteBpe::find(std::string_view bytes) const {
  auto it = index_.find(bytes);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

void ByteBpe::derive_merges_from_vocab() {
  for (size_t t = 0; t < tokens_.size(); ++t) {
    if (!present_[t]) continue;
    std::string_view s = tokens_[t];
    for (size_t k = 1; k < s.size(); ++k) {
      auto a = index_.find(s.substr(0, k));
      if (a == index_.end()) continue;
      auto b = index_.find(s.substr(k));
      if (b == index_.end()) continue;
      merger_.add_merge(a->second, b->second, uint32_t(t), int32_t(t));
    }
  }
}

void ByteBpe::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (whole_piece_first) {
    if (auto id = find(piece)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = cache_.cacheable(piece);
  if (cacheable && cache_.lookup(piece, out)) return;
  const size_t before = out.size();
  merger_.encode(piece, out);
  if (cacheable) cache_.store(piece, out.data() + before, out.size() - before);
}

}  // namespace sluice::text
