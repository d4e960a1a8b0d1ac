// Byte-pair merging shared by the tokenizer.json and tiktoken tokenizers.
//
// Symbols are token ids; a piece starts as one symbol per byte. A merge table
// maps an adjacent pair (left id, right id) to (rank, merged id). Encoding
// repeatedly applies the pair with the lowest rank, the leftmost on ties,
// until no adjacent pair has a merge -- the rule of both HF BPE (rank = merge
// index) and tiktoken (rank = rank of the concatenated bytes). A binary heap
// over pair candidates with lazy invalidation and a doubly linked symbol list
// make this O(n log n) per piece instead of quadratic rescans.
#pragma once
#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::text {

class BpeMerger {
 public:
  BpeMerger();

  // Symbol id of a single byte (-1 while unset).
  void set_byte(uint8_t b, int32_t id) { byte_id_[b] = id; }
  int32_t byte_id(uint8_t b) const { return byte_id_[b]; }

  // Adds a merge; returns false if the pair already had one (the first stays).
  bool add_merge(int32_t left, int32_t right, uint32_t rank, int32_t merged);
  size_t merge_count() const { return count_; }

  // Merges the bytes of `piece` and appends the resulting ids. Every byte of
  // the piece must have a symbol id (checked when the table is built).
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  struct Slot {
    uint64_t key;
    uint32_t rank;
    int32_t merged;
  };
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  const Slot* find(int32_t left, int32_t right) const;
  void grow();

  std::array<int32_t, 256> byte_id_;
  std::vector<Slot> slots_;
  size_t count_ = 0;
};

// A bounded map from piece bytes to ids, safe to share between threads.
class PieceCache {
 public:
  explicit PieceCache(size_t max_entries = 1 << 16, size_t max_piece_bytes = 128)
      : max_entries_(max_entries), max_piece_bytes_(max_piece_bytes) {}
  // Appends the cached ids of `piece` to out; false if not cached.
  bool lookup(std::string_view piece, std::vector<int32_t>& out) const;
  void store(std::string_view piece, const int32_t* ids, size_t n);
  bool cacheable(std::string_view piece) const { return piece.size() <= max_piece_bytes_; }

 private:
  size_t max_entries_, max_piece_bytes_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::vector<int32_t>> map_;
};

}  // namespace sluice::text

namespace sluice::text {

// A byte-level BPE vocabulary: token bytes by id, bytes -> id, the merge
// table and a cache of encoded pieces.
class ByteBpe {
 public:
  // Registers token `id` with raw bytes; false if the bytes or id are taken.
  bool add_token(int32_t id, std::string bytes);
  // Call once all tokens are added; builds the bytes -> id index and the
  // single-byte symbols. Returns the bytes with no single-byte token ("" if none).
  std::string finish_vocab();
  std::optional<int32_t> find(std::string_view bytes) const;
  std::string_view bytes(int32_t id) const { return tokens_[size_t(id)]; }
  bool has(int32_t id) const { return id >= 0 && size_t(id) < present_.size() && present_[size_t(id)]; }
  size_t id_limit() const { return tokens_.size(); }

  BpeMerger& merger() { return merger_; }
  // tiktoken: every token t that is the concatenation of two tokens a, b is the
  // merge (a, b) with rank `rank_of(t)`.
  void derive_merges_from_vocab();

  // When true, a piece that is itself a token is emitted without merging
  // (HF ignore_merges; always the case for tiktoken).
  bool whole_piece_first = false;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  struct Hash {
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  std::vector<std::string> tokens_;
  std::vector<bool> present_;
  std::unordered_map<std::string_view, int32_t, Hash> index_;
  BpeMerger merger_;
  mutable PieceCache cache_;
};

}  // namespace sluice::text
