// tokenizer.json pre-tokenizers: Sequence, Split (every `behavior`, `invert`),
// ByteLevel (add_prefix_space, use_regex) and Digits. Pieces stay raw UTF-8:
// the ByteLevel byte->printable-char mapping is a bijection, so the BPE model
// works on bytes directly (vocabulary strings are mapped back to bytes at load).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/regex.h"

namespace sluice::text {

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Re-splits every piece in place; empty pieces are dropped.
  virtual void apply(std::vector<std::string>& pieces) const = 0;
  virtual bool byte_level() const { return false; }
};

// Splits `text` around the matches of `re` as HF tokenizers' Split does.
std::vector<std::string> split_by_regex(const std::string& text, const Regex& re, SplitBehavior behavior,
                                        bool invert);

// `where` names the file and JSON path for error messages.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where,
                                                 RegexDialect dialect);

}  // namespace sluice::text
