#include "chat/json_prefix.h"

#include "util/json_depth.h"

namespace sluice::chat {

namespace {
bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
}  // namespace

bool JsonPrefix::feed(std::string_view bytes) {
  for (char c : bytes)
    if (!byte(static_cast<unsigned char>(c))) return false;
  return true;
}

// A value just ended: back to the enclosing container.
bool JsonPrefix::end_value() {
  mode_ = stack_.empty() ? Mode::Done : Mode::After;
  return true;
}

bool JsonPrefix::byte(unsigned char c) {
  switch (mode_) {
    case Mode::Start:
      if (is_ws(c)) return true;
      if (c != '{') return false;
      stack_.push_back('{');
      mode_ = Mode::KeyOrClose;
      return true;
    case Mode::Done: return is_ws(c);
    case Mode::Number: {
      const bool can_end = num_ == Zero || num_ == Int || num_ == Frac || num_ == ExpInt;
      if (is_digit(c)) {
        switch (num_) {
          case Sign: num_ = c == '0' ? Zero : Int; return true;
          case Zero: return false;  // no leading zeros
          case Int: case Frac: case ExpInt: return true;
          case Dot: num_ = Frac; return true;
          case Exp: case ExpSign: num_ = ExpInt; return true;
        }
      }
      if (c == '.' && (num_ == Zero || num_ == Int)) return num_ = Dot, true;
      if ((c == 'e' || c == 'E') && can_end && num_ != ExpInt) return num_ = Exp, true;
      if ((c == '+' || c == '-') && num_ == Exp) return num_ = ExpSign, true;
      if (!can_end) return false;
      end_value();
      return byte(c);  // the byte after a number belongs to what follows it
    }
    case Mode::Literal:
      if (c != static_cast<unsigned char>(*literal_)) return false;
      if (*++literal_ == '\0') end_value();
      return true;
    case Mode::String:
      // JSON text is UTF-8 (RFC 8259): multi-byte sequences are checked as they
      // arrive (no overlong forms, surrogates or code points past U+10FFFF).
      if (utf8_left_ > 0) {
        if (c < utf8_lo_ || c > utf8_hi_) return false;
        utf8_lo_ = 0x80, utf8_hi_ = 0xBF;
        --utf8_left_;
        return true;
      }
      if (c >= 0x80) {
        utf8_lo_ = 0x80, utf8_hi_ = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) utf8_left_ = 1;
        else if (c >= 0xE0 && c <= 0xEF) utf8_left_ = 2, utf8_lo_ = c == 0xE0 ? 0xA0 : 0x80, utf8_hi_ = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4) utf8_left_ = 3, utf8_lo_ = c == 0xF0 ? 0x90 : 0x80, utf8_hi_ = c == 0xF4 ? 0x8F : 0xBF;
        else return false;
        return true;
      }
      if (c == '"') {
        if (in_key_) {
          in_key_ = false;
          mode_ = Mode::Colon;
          return true;
        }
        return end_value();
      }
      if (c == '\\') return mode_ = Mode::Escape, true;
      return c >= 0x20;
    case Mode::Escape:
      if (c == 'u') return hex_left_ = 4, escape_ = 0, mode_ = Mode::Unicode, true;
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't')
        return mode_ = Mode::String, true;
      return false;
    case Mode::Unicode: {
      // \uXXXX names a UTF-16 unit: a high surrogate (D800-DBFF) must be followed
      // by \u and a low one (DC00-DFFF), and a low one never stands alone, or the
      // string is no Unicode text (nlohmann::json refuses it). A digit is refused
      // as soon as no completion of the escape can be valid, so every accepted
      // prefix can still be finished.
      if (!is_hex(c)) return false;
      const unsigned d = is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
      const unsigned v = escape_ * 16u + d;
      escape_ = uint16_t(v);
      if (--hex_left_ > 0) {
        const unsigned shift = 4u * hex_left_, lo = v << shift, hi = ((v + 1) << shift) - 1;
        const bool meets_low = lo <= 0xDFFF && hi >= 0xDC00, inside_low = lo >= 0xDC00 && hi <= 0xDFFF;
        return high_surrogate_ ? meets_low : !inside_low;
      }
      if (high_surrogate_) {
        if (v < 0xDC00 || v > 0xDFFF) return false;
        high_surrogate_ = false;
      } else if (v >= 0xD800 && v <= 0xDBFF) {
        high_surrogate_ = true;
        return mode_ = Mode::PairBackslash, true;
      } else if (v >= 0xDC00 && v <= 0xDFFF) {
        return false;
      }
      mode_ = Mode::String;
      return true;
    }
    case Mode::PairBackslash: return c == '\\' && (mode_ = Mode::PairU, true);
    case Mode::PairU: return c == 'u' && (hex_left_ = 4, escape_ = 0, mode_ = Mode::Unicode, true);
    case Mode::KeyOrClose:
    case Mode::Key:
      if (is_ws(c)) return true;
      if (c == '"') return in_key_ = true, mode_ = Mode::String, true;
      if (c == '}' && mode_ == Mode::KeyOrClose) {
        stack_.pop_back();
        return end_value();
      }
      return false;
    case Mode::Colon:
      if (is_ws(c)) return true;
      return c == ':' && (mode_ = Mode::Value, true);
    case Mode::After:
      if (is_ws(c)) return true;
      if (c == ',') {
        mode_ = stack_.back() == '{' ? Mode::Key : Mode::Value;
        return true;
      }
      if ((c == '}' && stack_.back() == '{') || (c == ']' && stack_.back() == '[')) {
        stack_.pop_back();
        return end_value();
      }
      return false;
    case Mode::Value:
    case Mode::ValueOrClose:
      if (is_ws(c)) return true;
      if (c == ']' && mode_ == Mode::ValueOrClose) {
        stack_.pop_back();
        return end_value();
      }
      if (c == '{' || c == '[') {
        if (stack_.size() >= size_t(kMaxJsonDepth)) return false;
        stack_.push_back(char(c));
        mode_ = c == '{' ? Mode::KeyOrClose : Mode::ValueOrClose;
        return true;
      }
      if (c == '"') return in_key_ = false, mode_ = Mode::String, true;
      if (c == '-' || is_digit(c)) {
        mode_ = Mode::Number;
        num_ = c == '-' ? Sign : c == '0' ? Zero : Int;
        return true;
      }
      if (c == 't') return literal_ = "rue", mode_ = Mode::Literal, true;
      if (c == 'f') return literal_ = "alse", mode_ = Mode::Literal, true;
      if (c == 'n') return literal_ = "ull", mode_ = Mode::Literal, true;
      return false;
  }
  return false;
}

}  // namespace sluice::chat
