#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "util/error.h"

namespace sluice::text {

namespace {

// Unicode White_Space, as Rust's regex crate (and HF tokenizers' onig) use for \s.
constexpr const char* kRustSpace =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
// ECMAScript WhiteSpace + LineTerminator, what JavaScript's \s matches.
constexpr const char* kJsSpace =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}";

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

// Length of the escape sequence starting at p[i] == '\\'.
size_t escape_len(std::string_view p, size_t i, std::string_view pattern) {
  if (i + 1 >= p.size()) fail("regex '{}': pattern ends with a lone backslash", pattern);
  char c = p[i + 1];
  if ((c == 'p' || c == 'P' || c == 'x') && i + 2 < p.size() && p[i + 2] == '{') {
    size_t e = p.find('}', i + 3);
    if (e == std::string_view::npos) fail("regex '{}': unterminated '\\{}{{' at byte {}", pattern, c, i);
    return e + 1 - i;
  }
  if ((c == 'p' || c == 'P') && i + 2 < p.size()) return 3;  // \pL
  // a multi-byte UTF-8 character after the backslash stays whole
  size_t n = 1;
  while (i + 1 + n < p.size() && (uint8_t(p[i + 1 + n]) & 0xC0) == 0x80) ++n;
  return 1 + n;
}

// General categories (and PCRE2 specials) that \p{...} may name directly;
// anything else is taken as a script name.
bool is_category(std::string_view n) {
  static const char* const cats[] = {"L",  "L&", "LC", "Lu", "Ll", "Lt", "Lm", "Lo", "M",  "Mn", "Mc", "Me", "N",
                                     "Nd", "Nl", "No", "P",  "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S",  "Sm",
                                     "Sc", "Sk", "So", "Z",  "Zs", "Zl", "Zp", "C",  "Cc", "Cf", "Cs", "Co", "Cn",
                                     "Any", "Xan", "Xps", "Xsp", "Xwd", "Xuc"};
  for (const char* c : cats)
    if (n == c) return true;
  return false;
}

// Rust regex and JavaScript's \p{Script=...} match the Script property; PCRE2
// (since 10.40) matches Script_Extensions for a bare \p{Han}, so U+301C
// (Common, with Han among its extensions) would count as Han. Force Script.
std::string property_escape(std::string_view esc) {
  // esc is "\p{Name}" / "\P{Name}" or "\pX"
  if (esc.size() < 4 || esc[2] != '{') return std::string(esc);
  std::string_view name = esc.substr(3, esc.size() - 4);
  size_t eq = name.find_first_of("=:");
  if (eq != std::string_view::npos) {
    std::string_view key = name.substr(0, eq), val = name.substr(eq + 1);
    if (key == "Script" || key == "sc") return std::string(esc.substr(0, 3)) + "sc:" + std::string(val) + "}";
    if (key == "Script_Extensions" || key == "scx") return std::string(esc.substr(0, 3)) + "scx:" + std::string(val) + "}";
    if (key == "General_Category" || key == "gc") return std::string(esc.substr(0, 3)) + std::string(val) + "}";
    return std::string(esc);
  }
  if (is_category(name)) return std::string(esc);
  return std::string(esc.substr(0, 3)) + "sc:" + std::string(name) + "}";
}

class Rewriter {
 public:
  Rewriter(std::string_view p, const char* space) : p_(p), space_(space) {}

  std::string run() {
    std::string out;
    size_t i = 0;
    while (i < p_.size()) {
      char c = p_[i];
      if (c == '\\') {
        size_t n = escape_len(p_, i, p_);
        char e = p_[i + 1];
        if (e == 's')
          out += std::string("[") + space_ + "]";
        else if (e == 'S')
          out += std::string("[^") + space_ + "]";
        else if (e == 'p' || e == 'P')
          out += property_escape(p_.substr(i, n));
        else
          out.append(p_.substr(i, n));
        i += n;
      } else if (c == '[') {
        i = rewrite_class(i, out);
      } else {
        out += c;
        ++i;
      }
    }
    return out;
  }

 private:
  // Rewrites the body of a class (between the brackets) replacing \s.
  std::string class_body(std::string_view body, size_t at) {
    std::string out;
    size_t i = 0;
    while (i < body.size()) {
      if (body[i] == '\\') {
        size_t n = escape_len(body, i, p_);
        char e = body[i + 1];
        if (e == 's')
          out += space_;
        else if (e == 'S')
          fail("regex '{}': \\S inside a character class (byte {}) is not supported", p_, at + i);
        else if (e == 'p' || e == 'P')
          out += property_escape(body.substr(i, n));
        else
          out.append(body.substr(i, n));
        i += n;
      } else {
        out += body[i++];
      }
    }
    return out;
  }

  // p_[start] == '['; appends the rewritten class and returns the index after it.
  size_t rewrite_class(size_t start, std::string& out) {
    size_t i = start + 1;
    bool negated = false;
    if (i < p_.size() && p_[i] == '^') {
      negated = true;
      ++i;
    }
    const size_t body_start = i;
    if (i < p_.size() && p_[i] == ']') ++i;  // a leading ']' is literal
    size_t amp = std::string_view::npos, nested_start = 0, nested_end = 0;
    while (true) {
      if (i >= p_.size()) fail("regex '{}': unterminated character class at byte {}", p_, start);
      char c = p_[i];
      if (c == '\\') {
        i += escape_len(p_, i, p_);
      } else if (c == '[' && i + 1 < p_.size() && p_[i + 1] == ':') {
        size_t e = p_.find(":]", i + 2);
        if (e == std::string_view::npos) fail("regex '{}': unterminated POSIX class at byte {}", p_, i);
        i = e + 2;
      } else if (c == '&' && i + 1 < p_.size() && p_[i + 1] == '&') {
        if (amp != std::string_view::npos || negated)
          fail("regex '{}': unsupported class intersection at byte {}", p_, i);
        amp = i;
        i += 2;
        if (i >= p_.size() || p_[i] != '[')
          fail("regex '{}': class intersection at byte {} must be followed by a bracketed class", p_, amp);
        nested_start = i;
        ++i;
        if (i < p_.size() && p_[i] == '^') ++i;
        if (i < p_.size() && p_[i] == ']') ++i;
        while (true) {
          if (i >= p_.size()) fail("regex '{}': unterminated character class at byte {}", p_, nested_start);
          if (p_[i] == '\\') {
            i += escape_len(p_, i, p_);
          } else if (p_[i] == '[') {
            fail("regex '{}': nested character class at byte {} is not supported", p_, i);
          } else if (p_[i] == ']') {
            nested_end = ++i;
            break;
          } else {
            ++i;
          }
        }
        if (i >= p_.size() || p_[i] != ']')
          fail("regex '{}': class intersection at byte {} must end the class", p_, amp);
      } else if (c == ']') {
        break;
      } else {
        ++i;
      }
    }
    const size_t end = i;  // p_[end] == ']'
    if (amp == std::string_view::npos) {
      out += negated ? "[^" : "[";
      out += class_body(p_.substr(body_start, end - body_start), body_start);
      out += ']';
    } else {
      // [X&&[Y]] -> (?:(?=[Y])[X])
      std::string_view nested = p_.substr(nested_start + 1, nested_end - nested_start - 2);
      std::string nb;
      if (!nested.empty() && nested[0] == '^')
        nb = "[^" + class_body(nested.substr(1), nested_start + 2) + "]";
      else
        nb = "[" + class_body(nested, nested_start + 1) + "]";
      out += "(?:(?=" + nb + ")[" + class_body(p_.substr(body_start, amp - body_start), body_start) + "])";
    }
    return end + 1;
  }

  std::string_view p_;
  const char* space_;
};

}  // namespace

std::string rewrite_pattern(std::string_view pattern, RegexDialect dialect) {
  std::string p(pattern);
  if (dialect == RegexDialect::JavaScript) {
    // transformers.js createPattern(): strip \#, \&, \~ escapes, then its fixed replacements.
    std::string q;
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i] == '\\' && i + 1 < p.size() && (p[i + 1] == '#' || p[i + 1] == '&' || p[i + 1] == '~')) {
        q += p[i + 1];
        ++i;
      } else {
        q += p[i];
      }
    }
    p = replace_all(std::move(q), "(?i:'s|'t|'re|'ve|'m|'ll|'d)", "(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))");
    const std::string punct = ".,!?\xE2\x80\xA6\xE3\x80\x82\xEF\xBC\x8C\xE3\x80\x81\xE0\xA5\xA4\xDB\x94\xD8\x8C";
    p = replace_all(std::move(p), " ?[^(\\s|[" + punct + "])]+", " ?[^\\s" + punct + "]+");
  }
  return Rewriter(p, dialect == RegexDialect::Rust ? kRustSpace : kJsSpace).run();
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/#&~ ").find(c) != std::string_view::npos && c != ' ') out += '\\';
    out += c;
  }
  return out;
}

struct Regex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
};

namespace {
// Per-thread JIT stack: patterns with repeated groups (the rewritten class
// intersections) use stack in proportion to the word length.
struct MatchEnv {
  pcre2_match_context* ctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchEnv() {
    ctx = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 512 * 1024 * 1024, nullptr);
    if (ctx && stack) pcre2_jit_stack_assign(ctx, nullptr, stack);
    if (ctx) pcre2_set_heap_limit(ctx, 4u * 1024 * 1024);  // KiB: 4 GiB for the interpreter fallback
  }
  ~MatchEnv() {
    if (stack) pcre2_jit_stack_free(stack);
    if (ctx) pcre2_match_context_free(ctx);
  }
};
MatchEnv& match_env() {
  thread_local MatchEnv env;
  return env;
}
}  // namespace

Regex::Regex(std::string_view pattern, RegexDialect dialect, const std::string& what) : impl_(std::make_unique<Impl>()) {
  rewritten_ = rewrite_pattern(pattern, dialect);
  int err = 0;
  PCRE2_SIZE off = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten_.data()), rewritten_.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    fail("{}: cannot compile regex '{}' (rewritten '{}'): {} at byte {}", what, pattern, rewritten_,
         reinterpret_cast<const char*>(buf), size_t(off));
  }
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
}

Regex::~Regex() = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s) const {
  std::vector<std::pair<size_t, size_t>> out;
  MatchEnv& env = match_env();
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  if (!md) fail("regex: out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0;
  while (pos <= s.size()) {
    int rc = pcre2_match(impl_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, md, env.ctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(rc, buf, sizeof buf);
      pcre2_match_data_free(md);
      fail("regex '{}': matching failed at byte {}: {}", rewritten_, pos, reinterpret_cast<const char*>(buf));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      pos = e;
    } else {
      // empty match: step over one code point
      pos = b + 1;
      while (pos < s.size() && (uint8_t(s[pos]) & 0xC0) == 0x80) ++pos;
      if (b >= s.size()) break;
    }
  }
  pcre2_match_data_free(md);
  return out;
}

}  // namespace sluice::text
