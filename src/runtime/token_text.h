// A model's token ids as bytes of text and back: what drafting across
// tokenizers needs (runtime/retokenizing_drafter.h). runtime/ sees only this
// interface; engine/drafter.h makes one from a model directory (its tokenizer
// files, or the byte-level codec of synthetic models without them).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

class TokenText {
 public:
  virtual ~TokenText() = default;
  // The ids of `text` (added and special tokens written in it recognised).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The raw bytes of one id (an added token's content); empty for an id
  // without text (outside the tokenizer, or past the byte codec's 256).
  virtual std::string bytes(int32_t id) const = 0;
  // The id whose bytes are exactly `bytes` (an added token by content, or a
  // base token), if there is one: how a lone UTF-8 continuation byte is written.
  virtual std::optional<int32_t> id_of(std::string_view bytes) const = 0;
  // Whether an id may merge with text after it when the whole is tokenised
  // (BPE: " wor" + "ld" is " world"); false when each byte is one id.
  virtual bool merges() const = 0;
  // Whether the id is an added or special token (complete in itself).
  virtual bool is_added(int32_t id) const = 0;
  virtual std::string describe() const = 0;
};

// Ids 0-255 are the bytes, any other id has no text (the byte-level codec of
// models without tokenizer files; chat/chat_codec.h writes conversations so).
class ByteTokenText : public TokenText {
 public:
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string bytes(int32_t id) const override;
  std::optional<int32_t> id_of(std::string_view bytes) const override;
  bool merges() const override { return false; }
  bool is_added(int32_t) const override { return false; }
  std::string describe() const override { return "byte-level codec (no tokenizer files)"; }
};

}  // namespace sluice
