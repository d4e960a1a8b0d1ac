// Hugging Face tokenizer.json with a byte-level BPE model (DeepSeek-V3, Qwen3,
// gpt-oss copies). Pipeline per encode():
//   1. split the text on added tokens (longest match, left to right; lstrip /
//      rstrip trim the neighbouring text);
//   2. each other span: normalizer (NFC/NFD/NFKC/NFKD via utf8proc, Sequence),
//      pre-tokenizer (Sequence, Split, ByteLevel, Digits);
//   3. BPE per piece (merges in "a b" or ["a","b"] form; ignore_merges).
// Patterns are compiled in the JavaScript dialect (see text/regex.h) so the
// pieces equal those of transformers.js, the reference the tests run.
#pragma once
#include <memory>
#include <string>

#include "text/added_tokens.h"
#include "text/bpe.h"
#include "text/pretokenizer.h"
#include "text/tokenizer.h"

namespace sluice::text {

class Normalizer;

class HfTokenizer : public Tokenizer {
 public:
  // Parses tokenizer.json text; `path` names it in errors. `config` is the
  // parsed tokenizer_config.json (may be null) for bos/eos/pad tokens.
  HfTokenizer(std::string_view json_text, const std::string& path, const nlohmann::json& config);
  ~HfTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::vector<int32_t> encode_ordinary(std::string_view text) const override;
  std::string_view token_bytes(int32_t id) const override;
  int64_t vocab_size() const override { return int64_t(id_limit_); }
  std::string kind() const override { return "tokenizer.json"; }

 protected:
  bool has_id(int32_t id) const override;
  std::optional<int32_t> base_token_id(std::string_view bytes) const override { return bpe_.find(bytes); }

 private:
  void encode_span(std::string_view span, std::vector<int32_t>& out) const;

  ByteBpe bpe_;
  AddedTokenMatcher matcher_;
  std::vector<const AddedToken*> added_by_id_;  // indexed by id, null if not added
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_;
  size_t id_limit_ = 0;
};

// Reads bos/eos/pad from a tokenizer_config.json object (string or {content}).
void read_special_names(const nlohmann::json& config, std::optional<std::string>& bos, std::optional<std::string>& eos,
                        std::optional<std::string>& pad);

}  // namespace sluice::text
