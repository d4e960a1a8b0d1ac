// Which tokens a grammar allows next, for the whole vocabulary at once: the
// tokens sorted by their bytes (VocabByBytes, built once per codec and
// vocabulary size) are walked as a trie with the grammar's cursor, one byte
// per trie edge, so a rejected first byte rules out every token that starts
// with it without feeding any of them. Same answer as GrammarCursor::allows
// on each token's bytes (tests/unit/token_mask_test.cpp compares them), but
// where the per-token check copied the cursor and fed whole tokens (160k
// copies per masked step with Kimi's vocabulary), the walk feeds only the
// prefixes the grammar can take.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "chat/chat_codec.h"
#include "chat/grammar.h"

namespace sluice::chat {

class VocabByBytes {
 public:
  // Tokens [0, vocab) of the codec, by token_bytes (ids in order among equal bytes).
  VocabByBytes(const ChatCodec& codec, int64_t vocab);
  int64_t vocab() const { return vocab_; }
  // The shared index of this codec and vocabulary size (built on first use and kept
  // for the process: the last four codecs and sizes).
  static std::shared_ptr<const VocabByBytes> of(const ChatCodec& codec, int64_t vocab);

  // allowed[t] = 1 where the cursor takes token t's (non-empty) bytes, 0 elsewhere.
  std::vector<char> allowed(const GrammarCursor& cursor) const;

 private:
  void walk(const GrammarCursor& c, size_t lo, size_t hi, size_t depth, std::vector<GrammarCursor>& after,
            std::vector<char>& out) const;
  int64_t vocab_;
  std::vector<std::string> bytes_;  // sorted
  std::vector<int32_t> ids_;        // ids_[i]: the token whose bytes are bytes_[i]
  size_t max_bytes_ = 0;            // the longest token's
};

}  // namespace sluice::chat
