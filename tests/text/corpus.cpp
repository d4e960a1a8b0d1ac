#include "text/corpus.h"

#include <random>

#include "text/regex.h"
#include "text/utf8.h"

namespace sluice::test {

namespace {

using text::utf8_append;

struct Gen {
  std::mt19937_64 rng;
  text::Regex unassigned{"[\\p{Cn}\\p{Cs}]", text::RegexDialect::Rust, "corpus"};
  std::vector<std::string> specials;

  explicit Gen(uint64_t seed) : rng(seed) {}
  size_t below(size_t n) { return n ? size_t(rng() % n) : 0; }
  bool chance(int pct) { return below(100) < size_t(pct); }

  bool assigned(uint32_t cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) return false;
    std::string s;
    utf8_append(s, cp);
    return unassigned.find_all(s).empty();
  }
  uint32_t random_cp() {
    static const uint32_t planes[] = {0, 0, 0, 1, 1, 2, 3, 14, 15, 16};
    while (true) {
      uint32_t plane = planes[below(10)];
      uint32_t cp = (plane << 16) | uint32_t(below(0x10000));
      if (assigned(cp)) return cp;
    }
  }
  uint32_t in_range(uint32_t lo, uint32_t hi) {
    while (true) {
      uint32_t cp = lo + uint32_t(below(hi - lo + 1));
      if (assigned(cp)) return cp;
    }
  }
  void add(std::string& s, uint32_t cp) { utf8_append(s, cp); }

  std::string random_unicode() {
    std::string s;
    size_t n = 1 + below(40);
    for (size_t i = 0; i < n; ++i) add(s, random_cp());
    return s;
  }
  std::string cjk() {
    static const uint32_t ranges[][2] = {{0x4E00, 0x9FFF}, {0x3040, 0x309F}, {0x30A0, 0x30FF}, {0xAC00, 0xD7A3},
                                         {0x3400, 0x4DBF}, {0x20000, 0x2A6DF}, {0xFF01, 0xFF5E}, {0x3000, 0x303F}};
    std::string s;
    size_t n = 1 + below(60);
    for (size_t i = 0; i < n; ++i) {
      if (chance(10)) {
        s += chance(50) ? " " : (chance(50) ? "abc" : "123");
        continue;
      }
      auto& r = ranges[below(8)];
      add(s, in_range(r[0], r[1]));
    }
    return s;
  }
  std::string emoji() {
    static const uint32_t people[] = {0x1F468, 0x1F469, 0x1F467, 0x1F466, 0x1F9D1, 0x1F44D, 0x1F44B, 0x1F3C3};
    std::string s;
    size_t n = 1 + below(8);
    for (size_t i = 0; i < n; ++i) {
      switch (below(6)) {
        case 0: {  // ZWJ family
          size_t k = 2 + below(3);
          for (size_t j = 0; j < k; ++j) {
            if (j) add(s, 0x200D);
            add(s, people[below(8)]);
            if (chance(30)) add(s, 0x1F3FB + uint32_t(below(5)));  // skin tone
          }
          break;
        }
        case 1:  // flag
          add(s, 0x1F1E6 + uint32_t(below(26)));
          add(s, 0x1F1E6 + uint32_t(below(26)));
          break;
        case 2:  // symbol + VS16
          add(s, in_range(0x2600, 0x27BF));
          add(s, 0xFE0F);
          break;
        case 3:
          add(s, in_range(0x1F300, 0x1FAFF));
          break;
        case 4:  // keycap
          s += char('0' + below(10));
          add(s, 0xFE0F);
          add(s, 0x20E3);
          break;
        default:
          s += chance(50) ? " " : "ok ";
      }
    }
    return s;
  }
  std::string combining() {
    std::string s;
    size_t n = 1 + below(20);
    for (size_t i = 0; i < n; ++i) {
      static const char* bases[] = {"a", "e", "o", "A", "n", "u", "i", " ", "\xD7\x90", "\xE0\xA4\x95", "1"};
      s += bases[below(11)];
      size_t k = below(4);
      for (size_t j = 0; j < k; ++j) {
        switch (below(4)) {
          case 0: add(s, in_range(0x0300, 0x036F)); break;
          case 1: add(s, in_range(0x1AB0, 0x1ACE)); break;
          case 2: add(s, in_range(0x20D0, 0x20F0)); break;
          default: add(s, in_range(0x0591, 0x05C7)); break;
        }
      }
      if (chance(20)) add(s, in_range(0x00C0, 0x017F));  // precomposed Latin
      if (chance(10)) add(s, in_range(0xAC00, 0xD7A3));   // Hangul syllable
      if (chance(10)) {                                   // conjoining jamo (NFC composes them)
        add(s, in_range(0x1100, 0x1112));
        add(s, in_range(0x1161, 0x1175));
      }
    }
    return s;
  }
  std::string whitespace() {
    static const uint32_t ws[] = {' ', ' ', ' ', '\t', '\n', '\r', 0x0B, 0x0C, 0x85, 0xA0, 0x1680,
                                  0x2000, 0x2003, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF, 0x200B, 0x1C};
    std::string s;
    size_t n = 1 + below(12);
    for (size_t i = 0; i < n; ++i) {
      size_t k = 1 + below(chance(20) ? 40 : 5);
      for (size_t j = 0; j < k; ++j) {
        if (chance(50))
          s += ' ';
        else
          add(s, ws[below(sizeof ws / sizeof ws[0])]);
      }
      if (chance(30)) s += "\r\n";
      static const char* words[] = {"word", "x", "Hello", "3", "!", "'s", "\xC3\xA9t\xC3\xA9", "\xE4\xBD\xA0", "//", "a.b"};
      if (chance(80)) s += words[below(10)];
    }
    return s;
  }
  std::string digits() {
    std::string s;
    size_t n = 1 + below(8);
    for (size_t i = 0; i < n; ++i) {
      size_t k = 1 + below(chance(20) ? 60 : 8);
      switch (below(6)) {
        case 0:
        case 1:
        case 2:
          for (size_t j = 0; j < k; ++j) s += char('0' + below(10));
          break;
        case 3:
          for (size_t j = 0; j < k; ++j) add(s, 0x0660 + uint32_t(below(10)));  // Arabic-Indic
          break;
        case 4:
          for (size_t j = 0; j < k; ++j) add(s, 0xFF10 + uint32_t(below(10)));  // fullwidth
          break;
        default:
          for (size_t j = 0; j < k; ++j) add(s, chance(50) ? 0x00B2 : in_range(0x2160, 0x2188));  // ², Roman numerals
      }
      static const char* seps[] = {"", " ", ".", ",", "-", "e", "x", "$", "%", "\n"};
      s += seps[below(10)];
    }
    return s;
  }
  std::string code() {
    static const char* lines[] = {
        "#include <vector>\n",
        "int main(int argc, char** argv) {\n",
        "    for (size_t i = 0; i < n; ++i) { sum += a[i] * b[i]; }\n",
        "\treturn 0;\n}\n",
        "def f(x):\n    return x ** 2 if x > 0 else -x  # comment\n",
        "const y = await fetch(`/api/${id}?q=${encodeURIComponent(q)}`);\n",
        "{\"key\": [1, 2.5e-3, true, null], \"n\\u00e9\": \"v\\n\"}\n",
        "SELECT name, COUNT(*) FROM users WHERE id IN (1,2,3) GROUP BY name;\n",
        "    if (a && b || !c) x <<= 2; else y >>= 3;\n",
        "fn main() -> Result<(), Box<dyn Error>> { println!(\"{:?}\", v); Ok(()) }\n",
        "<div class=\"a\">&lt;tag&gt; &amp; text</div>\n",
        "  - item: 'quoted'\n    value: \"double\"\n",
        "x = [i for i in range(10)]  \t \n\n\n",
        "diff --git a/src/x.cpp b/src/x.cpp\n@@ -1,4 +1,5 @@\n-old\n+new\n",
    };
    std::string s;
    size_t n = 1 + below(10);
    for (size_t i = 0; i < n; ++i) {
      std::string l = lines[below(sizeof lines / sizeof lines[0])];
      if (chance(30)) l = std::string(below(12), chance(50) ? ' ' : '\t') + l;
      s += l;
    }
    return s;
  }
  std::string long_word() {
    std::string s;
    size_t n = 200 + below(chance(30) ? 20000 : 2000);
    switch (below(6)) {
      case 0:
        s.assign(n, char('a' + below(26)));
        break;
      case 1:
        for (size_t i = 0; i < n; ++i) s += char('a' + below(26));
        break;
      case 2:
        for (size_t i = 0; i < n / 4; ++i) add(s, 0x1F600 + uint32_t(below(3)));
        break;
      case 3:
        for (size_t i = 0; i < n; ++i) s += char(chance(50) ? 'a' + below(26) : 'A' + below(26));
        break;
      case 4:
        for (size_t i = 0; i < n / 3; ++i) add(s, in_range(0x0400, 0x04FF));  // Cyrillic
        break;
      default:
        s.assign(n, chance(50) ? '-' : ' ');
    }
    return s;
  }
  std::string prose() {
    static const char* words[] = {"the", "The", "quick", "brown", "fox", "don't", "it's", "I'm", "we'll", "they've",
                                  "you're", "he'd", "IT'S", "Ca'S", "can't", "naïve", "café", "Straße", "über",
                                  "東京", "北京市", "日本語", "こんにちは", "カタカナ", "한국어", "Привет", "мир", "γειά",
                                  "مرحبا", "שלום", "नमस्ते", "ไทย", "U.S.A.", "e-mail", "O'Neil", "3.14", "1,000",
                                  "2024-06-01", "$5", "100%", "(see", "below)", "\"quoted\"", "'single'", "«guillemets»",
                                  "—", "…", "::", "->", "==", "&&", "ſ's", "'ſ", "'K", "x'LL", "ǅemal", "ǈ", "ᾈ"};
    std::string s;
    size_t n = 1 + below(40);
    for (size_t i = 0; i < n; ++i) {
      if (i) s += chance(90) ? " " : (chance(50) ? "  " : "\n");
      s += words[below(sizeof words / sizeof words[0])];
      if (chance(15)) s += chance(50) ? "," : ".";
    }
    return s;
  }
  std::string with_specials() {
    std::string s;
    size_t n = 1 + below(6);
    for (size_t i = 0; i < n; ++i) {
      if (!specials.empty() && chance(60)) {
        std::string sp = specials[below(specials.size())];
        if (chance(15)) {  // a truncated marker stays text
          sp = sp.substr(0, 1 + below(sp.size()));
          sp.resize(text::utf8_complete_prefix(sp));
        }
        s += sp;
      }
      s += chance(50) ? prose() : (chance(50) ? " " : "\n");
    }
    return s;
  }
  std::string mixed() {
    std::string s;
    size_t n = 1 + below(6);
    for (size_t i = 0; i < n; ++i) {
      switch (below(9)) {
        case 0: s += random_unicode(); break;
        case 1: s += cjk(); break;
        case 2: s += emoji(); break;
        case 3: s += combining(); break;
        case 4: s += whitespace(); break;
        case 5: s += digits(); break;
        case 6: s += code(); break;
        case 7: s += with_specials(); break;
        default: s += prose(); break;
      }
    }
    return s;
  }
};

}  // namespace

std::vector<std::string> make_corpus(const CorpusOptions& o) {
  Gen g(o.seed);
  g.specials = o.specials;
  std::vector<std::string> out;
  out.push_back("");
  out.push_back(" ");
  out.push_back("a");
  for (size_t i = 0; i < o.per_kind; ++i) {
    out.push_back(g.random_unicode());
    out.push_back(g.cjk());
    out.push_back(g.emoji());
    out.push_back(g.combining());
    out.push_back(g.whitespace());
    out.push_back(g.digits());
    out.push_back(g.code());
    out.push_back(g.prose());
    out.push_back(g.with_specials());
    out.push_back(g.mixed());
    out.push_back(g.mixed() + g.mixed());
    if (i % 12 == 0) out.push_back(g.long_word());
  }
  for (size_t d = 0; d < o.big_docs; ++d) {
    std::string doc;
    while (doc.size() < o.big_doc_bytes) doc += g.mixed() + (g.chance(30) ? "\n\n" : " ");
    out.push_back(std::move(doc));
  }
  return out;
}

}  // namespace sluice::test
