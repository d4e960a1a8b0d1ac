// Text <-> token ids. `Tokenizer::load` reads a model directory:
//   - tokenizer.json (Hugging Face byte-level BPE; DeepSeek-V3, Qwen3, gpt-oss), or
//   - tiktoken.model + tokenizer_config.json (Kimi K2/K3; o200k/cl100k rank files).
//
// encode(text) matches the reference `encode(text, add_special_tokens=False)`:
// added and special tokens written in the text are recognised and map to their
// ids; nothing (no BOS) is prepended. encode_ordinary(text) never produces an
// added/special token id (use it for untrusted user or tool text).
//
// Invalid UTF-8 in the input is never an error: each ill-formed subsequence is
// replaced by U+FFFD (see text/utf8.h) before encoding, so encode(x) equals
// encode(utf8_sanitize(x)). decode() concatenates token bytes and replaces
// ill-formed UTF-8 the same way; ids outside the vocabulary throw sluice::Error.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "text/utf8.h"

namespace sluice::text {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false, rstrip = false;  // tokenizer.json only
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads the tokenizer of a model directory (see above); throws sluice::Error
  // naming the file and field on anything malformed.
  static std::unique_ptr<Tokenizer> load(const std::string& model_dir);

  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::vector<int32_t> encode_ordinary(std::string_view text) const = 0;

  // The raw bytes of one token (an added token's content for added tokens).
  virtual std::string_view token_bytes(int32_t id) const = 0;
  // Decoded text: token bytes concatenated, ill-formed UTF-8 replaced by U+FFFD.
  std::string decode(std::span<const int32_t> ids) const;

  // One past the largest valid id (base vocabulary plus added tokens).
  virtual int64_t vocab_size() const = 0;
  bool valid_id(int32_t id) const { return id >= 0 && id < vocab_size() && has_id(id); }

  // Added/special tokens (tokenizer.json added_tokens, tiktoken specials).
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  // Id of an added token by content, or of a base vocabulary token whose
  // bytes equal `content`; nullopt if neither.
  std::optional<int32_t> token_id(std::string_view content) const;
  bool is_special(int32_t id) const;

  // From tokenizer_config.json (bos_token / eos_token / pad_token), if set.
  const std::optional<std::string>& bos_token() const { return bos_; }
  const std::optional<std::string>& eos_token() const { return eos_; }
  const std::optional<std::string>& pad_token() const { return pad_; }
  std::optional<int32_t> bos_id() const { return bos_ ? token_id(*bos_) : std::nullopt; }
  std::optional<int32_t> eos_id() const { return eos_ ? token_id(*eos_) : std::nullopt; }

  // "tokenizer.json" or "tiktoken"
  virtual std::string kind() const = 0;

 protected:
  virtual bool has_id(int32_t id) const = 0;
  virtual std::optional<int32_t> base_token_id(std::string_view bytes) const = 0;

  std::vector<AddedToken> added_;
  std::optional<std::string> bos_, eos_, pad_;
};

// Streaming decode: feed ids as they are generated, get text that is safe to
// print. A trailing incomplete UTF-8 sequence is held back until the next
// token completes it (or flush() replaces it by U+FFFD). The concatenation of
// all push() results and flush() equals tokenizer.decode(all ids).
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tok) : tok_(tok) {}
  std::string push(int32_t id) { return utf8_.push(tok_.token_bytes(id)); }
  std::string flush() { return utf8_.flush(); }
  bool pending() const { return utf8_.pending(); }

 private:
  const Tokenizer& tok_;
  Utf8Assembler utf8_;
};

}  // namespace sluice::text
