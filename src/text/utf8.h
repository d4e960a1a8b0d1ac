// UTF-8 helpers shared by the tokenizers and the template engine.
//
// Invalid input policy (used everywhere text enters the engine): byte sequences
// that are not well-formed UTF-8 are replaced by U+FFFD, one replacement per
// "maximal subpart" (the WHATWG Encoding Standard / Unicode 15 §3.9 rule that
// JavaScript's TextDecoder and Python's errors="replace" also follow). Surrogate
// code points (ED A0..BF xx) and overlong forms are invalid.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::text {

// Decodes one code point at s[i]. On success returns the code point and sets
// *len to its byte length; on an ill-formed sequence returns -1 and sets *len
// to the length of the maximal subpart to replace (>= 1).
int32_t utf8_decode(std::string_view s, size_t i, size_t* len);

// Appends the UTF-8 encoding of code point cp (0..0x10FFFF, no surrogates).
void utf8_append(std::string& out, uint32_t cp);

bool utf8_valid(std::string_view s);

// Returns s with every ill-formed subsequence replaced by U+FFFD (see above).
std::string utf8_sanitize(std::string_view s);

// Length of the longest prefix of s that ends on a code point boundary, holding
// back a trailing sequence that is an incomplete but so far valid code point
// (at most 3 bytes). Used by streaming decoders.
size_t utf8_complete_prefix(std::string_view s);

// Streaming assembly: bytes in as they come (a token's bytes may end inside a
// character), complete text out. An incomplete but so far valid sequence at
// the end is held for the next push(); ill-formed bytes are replaced as above,
// so the concatenated output equals utf8_sanitize(all bytes). flush() replaces
// a sequence left unfinished at the end. The one assembler of the engine: the
// tokenizers' IncrementalDecoder and the byte-level codec both use it.
class Utf8Assembler {
 public:
  std::string push(std::string_view bytes);
  std::string flush();
  bool pending() const { return !held_.empty(); }

 private:
  std::string held_;
};

// Number of code points (after sanitising, each replaced subpart counts one).
size_t utf8_count(std::string_view s);

}  // namespace sluice::text

namespace sluice::text {
// Unicode normalization forms via utf8proc (input must be valid UTF-8).
std::string utf8_nfc(std::string_view s);
}  // namespace sluice::text
