#include <cctype>

#include "text/jinja/ast.h"
#include "util/error.h"

namespace sluice::text::jinja {

namespace {

struct Src {
  std::string text;
  std::vector<int> line;  // source line of each byte
};

// Trailing newline, lstrip_blocks (spaces/tabs before "{%", "{#", "{-" at a line
// start) and trim_blocks (newline after "%}", "#}", "-}"), keeping line numbers.
Src preprocess(const std::string& in) {
  std::string s = in;
  if (!s.empty() && s.back() == '\n') s.pop_back();
  std::vector<int> line(s.size());
  int l = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    line[i] = l;
    if (s[i] == '\n') ++l;
  }
  Src a;
  for (size_t i = 0; i < s.size();) {
    if (i == 0 || s[i - 1] == '\n') {
      size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
      if (j > i && j + 1 < s.size() && s[j] == '{' && (s[j + 1] == '#' || s[j + 1] == '%' || s[j + 1] == '-')) i = j;
    }
    a.text += s[i];
    a.line.push_back(line[i]);
    ++i;
  }
  Src b;
  for (size_t i = 0; i < a.text.size(); ++i) {
    b.text += a.text[i];
    b.line.push_back(a.line[i]);
    if (a.text[i] == '}' && i > 0 && (a.text[i - 1] == '%' || a.text[i - 1] == '#' || a.text[i - 1] == '-') &&
        i + 1 < a.text.size() && a.text[i + 1] == '\n')
      ++i;
  }
  return b;
}

bool is_word(char c) { return std::isalnum(uint8_t(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

std::vector<Token> lex(const std::string& source) {
  Src src = preprocess(source);
  const std::string& s = src.text;
  std::vector<Token> toks;
  size_t p = 0;
  auto line_at = [&](size_t i) { return src.line.empty() ? 1 : src.line[std::min(i, src.line.size() - 1)]; };
  auto err = [&](const std::string& what) -> void { fail("template line {}: {}", line_at(p), what); };
  auto push = [&](Tok t, std::string v, size_t at) { toks.push_back(Token{t, std::move(v), line_at(at)}); };
  auto strip_trailing = [&] {
    if (!toks.empty() && toks.back().type == Tok::Text) {
      std::string& v = toks.back().value;
      while (!v.empty() && is_space(v.back())) v.pop_back();  // (ASCII whitespace; JS trimEnd is wider)
      if (v.empty()) toks.pop_back();
    }
  };
  auto skip_leading = [&] {
    while (p < s.size() && is_space(s[p])) ++p;
  };
  static const std::pair<const char*, Tok> table[] = {
      {"{%", Tok::OpenStmt}, {"%}", Tok::CloseStmt}, {"{{", Tok::OpenExpr}, {"}}", Tok::CloseExpr},
      {"(", Tok::LParen},    {")", Tok::RParen},     {"{", Tok::LBrace},    {"}", Tok::RBrace},
      {"[", Tok::LBracket},  {"]", Tok::RBracket},   {",", Tok::Comma},     {".", Tok::Dot},
      {":", Tok::Colon},     {"|", Tok::Pipe},       {"<=", Tok::Cmp},      {">=", Tok::Cmp},
      {"==", Tok::Cmp},      {"!=", Tok::Cmp},       {"<", Tok::Cmp},       {">", Tok::Cmp},
      {"+", Tok::Add},       {"-", Tok::Add},        {"~", Tok::Add},       {"**", Tok::Pow},
      {"*", Tok::Mul},       {"//", Tok::Mul},       {"/", Tok::Mul},       {"%", Tok::Mul},
      {"=", Tok::Equals}};
  int brace_depth = 0;
  while (p < s.size()) {
    Tok last = toks.empty() ? Tok::Text : toks.back().type;
    if (toks.empty() || last == Tok::CloseStmt || last == Tok::CloseExpr || last == Tok::Comment) {
      size_t st = p;
      while (p < s.size() && !(s[p] == '{' && p + 1 < s.size() && (s[p + 1] == '%' || s[p + 1] == '{' || s[p + 1] == '#')))
        ++p;
      if (p > st) {
        push(Tok::Text, s.substr(st, p - st), st);
        continue;
      }
    }
    if (s.compare(p, 2, "{#") == 0) {
      size_t st = p;
      p += 2;
      bool strip_before = p < s.size() && s[p] == '-';
      if (strip_before) ++p;
      size_t e = s.find("#}", p);
      if (e == std::string::npos) err("missing end of comment tag '#}'");
      std::string c = s.substr(p, e - p);
      bool strip_after = !c.empty() && c.back() == '-';
      if (strip_before) strip_trailing();
      push(Tok::Comment, c, st);
      p = e + 2;
      if (strip_after) skip_leading();
      continue;
    }
    if (s.compare(p, 3, "{%-") == 0) {
      strip_trailing();
      push(Tok::OpenStmt, "{%", p);
      p += 3;
      continue;
    }
    if (s.compare(p, 3, "{{-") == 0) {
      strip_trailing();
      push(Tok::OpenExpr, "{{", p);
      brace_depth = 0;
      p += 3;
      continue;
    }
    skip_leading();
    if (p >= s.size()) break;
    if (s.compare(p, 3, "-%}") == 0) {
      push(Tok::CloseStmt, "%}", p);
      p += 3;
      skip_leading();
      continue;
    }
    if (s.compare(p, 3, "-}}") == 0) {
      push(Tok::CloseExpr, "}}", p);
      p += 3;
      skip_leading();
      continue;
    }
    char c = s[p];
    if (c == '-' || c == '+') {
      Tok lt = toks.empty() ? Tok::Text : toks.back().type;
      if (toks.empty() || lt == Tok::Text) err(std::string("unexpected character '") + c + "'");
      if (!(lt == Tok::Ident || lt == Tok::Number || lt == Tok::String || lt == Tok::RParen || lt == Tok::RBracket)) {
        size_t st = p++;
        std::string num;
        while (p < s.size() && is_digit(s[p])) num += s[p++];
        if (!num.empty() && p + 1 < s.size() && s[p] == '.' && is_digit(s[p + 1])) {
          num += s[p++];
          while (p < s.size() && is_digit(s[p])) num += s[p++];
        }
        if (num.empty())
          push(Tok::Unary, std::string(1, c), st);
        else
          push(Tok::Number, std::string(1, c) + num, st);
        continue;
      }
    }
    bool matched = false;
    for (const auto& [seq, type] : table) {
      size_t n = std::char_traits<char>::length(seq);
      if (type == Tok::CloseExpr && brace_depth > 0) continue;
      if (s.compare(p, n, seq) == 0) {
        push(type, seq, p);
        if (type == Tok::OpenExpr) brace_depth = 0;
        if (type == Tok::LBrace) ++brace_depth;
        if (type == Tok::RBrace) --brace_depth;
        p += n;
        matched = true;
        break;
      }
    }
    if (matched) continue;
    if (c == '\'' || c == '"') {
      size_t st = p++;
      std::string v;
      while (true) {
        if (p >= s.size()) err("unterminated string literal");
        char d = s[p];
        if (d == c) break;
        if (d == '\\') {
          if (++p >= s.size()) err("unexpected end of input in string literal");
          char e = s[p++];
          switch (e) {
            case 'n': v += '\n'; break;
            case 't': v += '\t'; break;
            case 'r': v += '\r'; break;
            case 'b': v += '\b'; break;
            case 'f': v += '\f'; break;
            case 'v': v += '\v'; break;
            case '\'': v += '\''; break;
            case '"': v += '"'; break;
            case '\\': v += '\\'; break;
            default: err(std::string("unsupported escape '\\") + e + "' in string literal");
          }
          continue;
        }
        v += d;
        ++p;
      }
      ++p;
      push(Tok::String, v, st);
      continue;
    }
    if (is_digit(c)) {
      size_t st = p;
      std::string num;
      while (p < s.size() && is_digit(s[p])) num += s[p++];
      if (!(toks.size() && toks.back().type == Tok::Dot) && p + 1 < s.size() && s[p] == '.' && is_digit(s[p + 1])) {
        num += s[p++];
        while (p < s.size() && is_digit(s[p])) num += s[p++];
      }
      push(Tok::Number, num, st);
      continue;
    }
    if (is_word(c)) {
      size_t st = p;
      while (p < s.size() && is_word(s[p])) ++p;
      push(Tok::Ident, s.substr(st, p - st), st);
      continue;
    }
    err(std::string("unexpected character '") + c + "'");
  }
  return toks;
}

}  // namespace sluice::text::jinja
