// A recogniser for prefixes of one JSON object, byte by byte: used to keep
// generation inside valid JSON for response_format {"type": "json_object"}.
// Copyable, so a candidate token can be tried on a copy.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::chat {

class JsonPrefix {
 public:
  // Feeds bytes; false (and the state is then unusable) if they cannot continue a JSON object.
  bool feed(std::string_view bytes);
  // A whole object has been read (only whitespace may follow).
  bool complete() const { return mode_ == Mode::Done; }
  int depth() const { return int(stack_.size()); }

 private:
  enum class Mode : uint8_t {
    Start, Value, ValueOrClose, KeyOrClose, Key, Colon, After, String, Escape, Unicode, PairBackslash, PairU, Number,
    Literal, Done
  };
  enum Num : uint8_t { Sign, Zero, Int, Dot, Frac, Exp, ExpSign, ExpInt };
  bool byte(unsigned char c);
  bool end_value();
  std::string stack_;  // '{' or '[' per open container
  Mode mode_ = Mode::Start;
  bool in_key_ = false;
  uint8_t hex_left_ = 0;
  uint16_t escape_ = 0;        // the \uXXXX value read so far
  bool high_surrogate_ = false;  // a \uD800-\uDBFF escape was read: its low half must follow
  uint8_t utf8_left_ = 0, utf8_lo_ = 0x80, utf8_hi_ = 0xBF;  // continuation bytes still due in a string, and the next one's range
  Num num_ = Sign;
  const char* literal_ = nullptr;  // rest of true/false/null to match
};

}  // namespace sluice::chat
