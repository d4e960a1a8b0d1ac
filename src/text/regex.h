// Pre-tokenizer regular expressions on top of PCRE2 (UTF + UCP, JIT).
//
// Tokenizer files carry patterns written for other engines. Before compiling, a
// pattern is rewritten so PCRE2 gives the same matches as the engine the
// reference tokenizer uses (the "dialect"):
//  - `\s` / `\S` become explicit classes: Rust regex (tiktoken, HF tokenizers)
//    uses Unicode White_Space (includes U+0085); JavaScript (transformers.js) uses
//    its own list (includes U+FEFF, not U+0085). PCRE2's own \s has neither.
//  - Rust class intersection `[X&&[^Y]]` becomes `(?:(?![Y])[X])`.
//  - JavaScript dialect also applies the rewrites transformers.js makes before
//    `new RegExp(p, "gu")` (drops `\#`, `\&`, `\~` escapes; replaces the
//    `(?i:'s|'t|...)` group by an ASCII-only case alternative).
// Character properties (\p{L}, \p{Han}, ...) come from PCRE2's Unicode tables;
// code points unassigned in that Unicode version are classed Cn.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::text {

enum class RegexDialect { Rust, JavaScript };

// Applies the rewrites above; throws sluice::Error on syntax it cannot map.
std::string rewrite_pattern(std::string_view pattern, RegexDialect dialect);

class Regex {
 public:
  // `what` names the pattern's origin in error messages (file and field).
  Regex(std::string_view pattern, RegexDialect dialect, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // All non-overlapping matches in `s` (valid UTF-8), left to right, as
  // [begin, end) byte offsets; empty matches are skipped.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;

  const std::string& pattern() const { return rewritten_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string rewritten_;
};

// Escapes a literal string for use in a pattern.
std::string regex_escape(std::string_view literal);

}  // namespace sluice::text
