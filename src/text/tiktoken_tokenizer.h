// tiktoken rank files (`tiktoken.model`: one "base64(bytes) rank" per line, ids =
// ranks) with a pre-tokenizer pattern and special tokens.
//
// In a model directory (Kimi K2/K3 layout) the specials come from
// tokenizer_config.json `added_tokens_decoder`; the pattern is
// tokenizer_config.json `pat_str` when present (an extension, used for the
// o200k/cl100k test copies), otherwise Kimi's pattern (`kKimiPattern`). For Kimi
// (`tokenizer_class` "TikTokenTokenizer"), the 256 ids after the base
// vocabulary are all special; unnamed ones are `<|reserved_token_{id}|>`, and
// input is cut into 400,000-code-point slices and runs of more than 25,000
// consecutive whitespace / non-whitespace code points (Python str.isspace)
// are split, as tokenization_kimi.py does.
// Patterns use the Rust dialect (see text/regex.h), as tiktoken does.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "text/added_tokens.h"
#include "text/bpe.h"
#include "text/regex.h"
#include "text/tokenizer.h"

namespace sluice::text {

// Kimi K2 / K3 pre-tokenizer pattern (8 alternatives, with `&&` intersections).
extern const char* const kKimiPattern;

struct TiktokenOptions {
  std::string pattern;
  std::vector<AddedToken> specials;
  bool kimi_chunking = false;  // 400k-slice and 25k-run splitting
  std::optional<std::string> bos, eos, pad;
};

class TiktokenTokenizer : public Tokenizer {
 public:
  // `ranks_text` is the content of a tiktoken.model file named `path`.
  TiktokenTokenizer(std::string_view ranks_text, const std::string& path, TiktokenOptions opts);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::vector<int32_t> encode_ordinary(std::string_view text) const override;
  std::string_view token_bytes(int32_t id) const override;
  int64_t vocab_size() const override { return int64_t(id_limit_); }
  std::string kind() const override { return "tiktoken"; }
  size_t base_vocab_size() const { return base_size_; }

 protected:
  bool has_id(int32_t id) const override;
  std::optional<int32_t> base_token_id(std::string_view bytes) const override { return bpe_.find(bytes); }

 private:
  void encode_chunk(std::string_view text, bool allow_special, std::vector<int32_t>& out) const;
  void encode_ordinary_span(std::string_view text, std::vector<int32_t>& out) const;
  std::vector<int32_t> encode_impl(std::string_view text, bool allow_special) const;

  ByteBpe bpe_;
  std::unique_ptr<Regex> re_;
  AddedTokenMatcher matcher_;
  std::vector<const AddedToken*> special_by_id_;
  size_t base_size_ = 0, id_limit_ = 0;
  bool kimi_chunking_ = false;
};

// Kimi's input chunking: 400,000-code-point slices, then runs of more than
// `max_run` whitespace / non-whitespace code points split (Python isspace).
std::vector<std::string_view> kimi_chunks(std::string_view text, size_t max_slice = 400000, size_t max_run = 25000);

}  // namespace sluice::text
