#include "text/utf8.h"

namespace sluice::text {

int32_t utf8_decode(std::string_view s, size_t i, size_t* len) {
  const size_t n = s.size();
  const uint8_t b0 = uint8_t(s[i]);
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  int need;
  uint32_t cp;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *len = 1;
    return -1;
  }
  size_t k = 1;
  for (int j = 0; j < need; ++j, ++k) {
    if (i + k >= n) {
      *len = k;
      return -1;
    }
    const uint8_t b = uint8_t(s[i + k]);
    const uint8_t l = j == 0 ? lo : 0x80, h = j == 0 ? hi : 0xBF;
    if (b < l || b > h) {
      *len = k;
      return -1;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  *len = k;
  return int32_t(cp);
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

bool utf8_valid(std::string_view s) {
  size_t i = 0, len = 0;
  while (i < s.size()) {
    if (uint8_t(s[i]) < 0x80) {
      ++i;
      continue;
    }
    if (utf8_decode(s, i, &len) < 0) return false;
    i += len;
  }
  return true;
}

std::string utf8_sanitize(std::string_view s) {
  if (utf8_valid(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0, len = 0;
  while (i < s.size()) {
    int32_t cp = utf8_decode(s, i, &len);
    if (cp < 0)
      out += "\xEF\xBF\xBD";
    else
      out.append(s.substr(i, len));
    i += len;
  }
  return out;
}

size_t utf8_complete_prefix(std::string_view s) {
  // Look at the last (up to 3) bytes for the start of an unfinished sequence.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t i = n - back;
    const uint8_t b = uint8_t(s[i]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking back
    if (b < 0xC2 || b > 0xF4) return n;
    size_t len = 0;
    if (utf8_decode(s, i, &len) < 0 && i + len == n) return i;  // valid so far, just cut short
    return n;
  }
  return n;
}

std::string Utf8Assembler::push(std::string_view bytes) {
  held_.append(bytes);
  const size_t n = utf8_complete_prefix(held_);
  std::string out = utf8_sanitize(std::string_view(held_).substr(0, n));
  held_.erase(0, n);
  return out;
}

std::string Utf8Assembler::flush() {
  std::string out = utf8_sanitize(held_);
  held_.clear();
  return out;
}

size_t utf8_count(std::string_view s) {
  size_t i = 0, len = 0, c = 0;
  while (i < s.size()) {
    utf8_decode(s, i, &len);
    i += len;
    ++c;
  }
  return c;
}

}  // namespace sluice::text

#include <utf8proc.h>

#include <cstdlib>

#include "util/error.h"

namespace sluice::text {
std::string utf8_nfc(std::string_view s) {
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), utf8proc_ssize_t(s.size()),
                                    &out, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail("NFC: {}", utf8proc_errmsg(n));
  std::string r(reinterpret_cast<char*>(out), size_t(n));
  std::free(out);
  return r;
}
}  // namespace sluice::text
