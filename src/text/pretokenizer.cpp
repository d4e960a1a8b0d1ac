#include "text/pretokenizer.h"

#include <algorithm>

#include "util/error.h"

namespace sluice::text {

std::vector<std::string> split_by_regex(const std::string& text, const Regex& re, SplitBehavior behavior,
                                        bool invert) {
  // Segments covering the text: (begin, end, is_delimiter).
  struct Seg {
    size_t b, e;
    bool delim;
  };
  std::vector<Seg> segs;
  size_t prev = 0;
  for (auto [b, e] : re.find_all(text)) {
    if (b > prev) segs.push_back({prev, b, invert});
    segs.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < text.size()) segs.push_back({prev, text.size(), invert});

  std::vector<std::string> out;
  auto piece = [&](const Seg& s) { return text.substr(s.b, s.e - s.b); };
  switch (behavior) {
    case SplitBehavior::Removed:
      for (const Seg& s : segs)
        if (!s.delim) out.push_back(piece(s));
      break;
    case SplitBehavior::Isolated:
      for (const Seg& s : segs) out.push_back(piece(s));
      break;
    case SplitBehavior::MergedWithPrevious: {
      bool prev_delim = false;
      for (const Seg& s : segs) {
        if (s.delim && !out.empty() && !prev_delim)
          out.back() += piece(s);
        else
          out.push_back(piece(s));
        prev_delim = s.delim;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      // right to left: a delimiter joins the piece after it unless that piece is a delimiter too
      bool next_delim = false;
      for (size_t k = segs.size(); k-- > 0;) {
        const Seg& s = segs[k];
        if (s.delim && !next_delim && !out.empty())
          out.back() = piece(s) + out.back();
        else
          out.push_back(piece(s));
        next_delim = s.delim;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
    case SplitBehavior::Contiguous: {
      bool prev_delim = false;
      for (const Seg& s : segs) {
        if (s.delim && prev_delim && !out.empty())
          out.back() += piece(s);
        else
          out.push_back(piece(s));
        prev_delim = s.delim;
      }
      break;
    }
  }
  return out;
}

namespace {

std::string get_string(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_string()) fail("{}: field '{}' must be a string", where, key);
  return j[key].get<std::string>();
}
bool get_bool(const nlohmann::json& j, const char* key, bool def, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_boolean()) fail("{}: field '{}' must be true or false", where, key);
  return j[key].get<bool>();
}

class RegexSplit : public PreTokenizer {
 public:
  RegexSplit(std::unique_ptr<Regex> re, SplitBehavior b, bool invert) : re_(std::move(re)), b_(b), invert_(invert) {}
  void apply(std::vector<std::string>& pieces) const override {
    std::vector<std::string> out;
    out.reserve(pieces.size());
    for (const auto& p : pieces)
      for (auto& q : split_by_regex(p, *re_, b_, invert_))
        if (!q.empty()) out.push_back(std::move(q));
    pieces.swap(out);
  }

 private:
  std::unique_ptr<Regex> re_;
  SplitBehavior b_;
  bool invert_;
};

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, std::unique_ptr<Regex> re) : prefix_(add_prefix_space), re_(std::move(re)) {}
  void apply(std::vector<std::string>& pieces) const override {
    std::vector<std::string> out;
    out.reserve(pieces.size());
    for (auto& p : pieces) {
      if (prefix_ && p.rfind(' ', 0) != 0) p.insert(p.begin(), ' ');
      if (!re_) {
        if (!p.empty()) out.push_back(std::move(p));
        continue;
      }
      // use_regex: keep only the matches (findall)
      for (auto [b, e] : re_->find_all(p)) out.push_back(p.substr(b, e - b));
    }
    pieces.swap(out);
  }
  bool byte_level() const override { return true; }

 private:
  bool prefix_;
  std::unique_ptr<Regex> re_;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> v) : v_(std::move(v)) {}
  void apply(std::vector<std::string>& pieces) const override {
    for (const auto& p : v_) p->apply(pieces);
  }
  bool byte_level() const override {
    for (const auto& p : v_)
      if (p->byte_level()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> v_;
};

SplitBehavior parse_behavior(const std::string& s, const std::string& where) {
  if (s == "Removed") return SplitBehavior::Removed;
  if (s == "Isolated") return SplitBehavior::Isolated;
  if (s == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (s == "Contiguous") return SplitBehavior::Contiguous;
  fail("{}: unknown Split behavior '{}'", where, s);
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where,
                                                 RegexDialect dialect) {
  if (!j.is_object()) fail("{}: must be an object", where);
  const std::string type = get_string(j, "type", where);
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      fail("{}: field 'pretokenizers' must be an array", where);
    std::vector<std::unique_ptr<PreTokenizer>> v;
    size_t i = 0;
    for (const auto& e : j["pretokenizers"])
      v.push_back(make_pre_tokenizer(e, fmt::format("{}.pretokenizers[{}]", where, i++), dialect));
    return std::make_unique<Sequence>(std::move(v));
  }
  if (type == "Split") {
    if (!j.contains("pattern") || !j["pattern"].is_object()) fail("{}: field 'pattern' must be an object", where);
    const auto& pat = j["pattern"];
    std::string re;
    if (pat.contains("Regex") && pat["Regex"].is_string())
      re = pat["Regex"].get<std::string>();
    else if (pat.contains("String") && pat["String"].is_string())
      re = regex_escape(pat["String"].get<std::string>());
    else
      fail("{}.pattern: needs a string 'Regex' or 'String'", where);
    auto b = parse_behavior(get_string(j, "behavior", where), where);
    return std::make_unique<RegexSplit>(std::make_unique<Regex>(re, dialect, where + ".pattern"), b,
                                        get_bool(j, "invert", false, where));
  }
  if (type == "ByteLevel") {
    std::unique_ptr<Regex> re;
    if (get_bool(j, "use_regex", true, where))
      re = std::make_unique<Regex>("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
                                   dialect, where + " (ByteLevel regex)");
    return std::make_unique<ByteLevel>(get_bool(j, "add_prefix_space", false, where), std::move(re));
  }
  if (type == "Digits") {
    const bool each = get_bool(j, "individual_digits", false, where);
    return std::make_unique<RegexSplit>(std::make_unique<Regex>(each ? "\\p{N}" : "\\p{N}+", dialect, where),
                                        SplitBehavior::Isolated, false);
  }
  fail("{}: unsupported pre_tokenizer type '{}' (supported: Sequence, Split, ByteLevel, Digits)", where, type);
}

}  // namespace sluice::text
