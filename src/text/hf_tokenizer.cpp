#include "text/hf_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>

#include "text/utf8.h"
#include "util/error.h"

namespace sluice::text {

namespace {

// GPT-2 bytes_to_unicode(): printable bytes map to themselves, the others to
// U+0100 + n in increasing byte order. Returns the inverse (code point -> byte).
const std::array<int, 324>& byte_level_inverse() {
  static const std::array<int, 324> inv = [] {
    std::array<int, 324> a;
    a.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      a[size_t(printable ? b : 256 + n++)] = b;
    }
    return a;
  }();
  return inv;
}

// Byte-level string -> raw bytes; nullopt if a character is outside the map.
std::optional<std::string> from_byte_level(std::string_view s) {
  const auto& inv = byte_level_inverse();
  std::string out;
  out.reserve(s.size());
  size_t i = 0, len = 0;
  while (i < s.size()) {
    int32_t cp = utf8_decode(s, i, &len);
    if (cp < 0 || cp >= 324 || inv[size_t(cp)] < 0) return std::nullopt;
    out += char(inv[size_t(cp)]);
    i += len;
  }
  return out;
}

bool js_space(uint32_t c) {
  return (c >= 9 && c <= 13) || c == 0x20 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

// JavaScript trimEnd / trimStart on UTF-8 (what transformers.js applies for lstrip / rstrip).
std::string_view trim_end(std::string_view s) {
  while (!s.empty()) {
    size_t start = s.size() - 1;
    while (start > 0 && (uint8_t(s[start]) & 0xC0) == 0x80) --start;
    size_t len = 0;
    int32_t cp = utf8_decode(s, start, &len);
    if (cp < 0 || !js_space(uint32_t(cp))) break;
    s.remove_suffix(s.size() - start);
  }
  return s;
}
std::string_view trim_start(std::string_view s) {
  while (!s.empty()) {
    size_t len = 0;
    int32_t cp = utf8_decode(s, 0, &len);
    if (cp < 0 || !js_space(uint32_t(cp))) break;
    s.remove_prefix(len);
  }
  return s;
}

}  // namespace

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string apply(std::string s) const = 0;
};

namespace {

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(int options) : options_(options) {}
  // Normalizes only the stretches that contain non-ASCII text. Safe because an
  // ASCII character is a starter that never combines with what precedes it, so
  // normalization never crosses the position before it; the ASCII character
  // just before a non-ASCII run is included (it may compose with a mark).
  std::string apply(std::string s) const override {
    size_t i = 0;
    while (i < s.size() && uint8_t(s[i]) < 0x80) ++i;
    if (i == s.size()) return s;
    std::string out(s, 0, i > 0 ? i - 1 : 0);
    size_t start = i > 0 ? i - 1 : 0;
    while (start < s.size()) {
      size_t j = start + 1;
      while (j < s.size() && uint8_t(s[j]) >= 0x80) ++j;  // the non-ASCII run
      out += map(std::string_view(s).substr(start, j - start));
      size_t k = j;
      while (k < s.size() && uint8_t(s[k]) < 0x80) ++k;  // an ASCII run
      if (k == s.size()) {
        out.append(s, j, k - j);
        break;
      }
      out.append(s, j, k - 1 - j);  // all but the last ASCII char, which joins the next stretch
      start = k - 1;
      if (k == j) start = k;  // no ASCII between runs (cannot happen: runs are maximal)
    }
    return out;
  }

 private:
  std::string map(std::string_view s) const {
    utf8proc_uint8_t* out = nullptr;
    utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), utf8proc_ssize_t(s.size()),
                                      &out, utf8proc_option_t(options_));
    if (n < 0) fail("normalizer: {}", utf8proc_errmsg(n));
    std::string r(reinterpret_cast<char*>(out), size_t(n));
    std::free(out);
    return r;
  }
  int options_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> v) : v_(std::move(v)) {}
  std::string apply(std::string s) const override {
    for (const auto& n : v_) s = n->apply(std::move(s));
    return s;
  }
  bool empty() const { return v_.empty(); }

 private:
  std::vector<std::unique_ptr<Normalizer>> v_;
};

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    fail("{}: must be null or an object with a string 'type'", where);
  const std::string type = j["type"].get<std::string>();
  const int stable = UTF8PROC_STABLE;
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(stable | UTF8PROC_COMPOSE);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(stable | UTF8PROC_DECOMPOSE);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(stable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(stable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      fail("{}: field 'normalizers' must be an array", where);
    std::vector<std::unique_ptr<Normalizer>> v;
    size_t i = 0;
    for (const auto& e : j["normalizers"]) {
      auto n = make_normalizer(e, fmt::format("{}.normalizers[{}]", where, i++));
      if (n) v.push_back(std::move(n));
    }
    if (v.empty()) return nullptr;
    return std::make_unique<SequenceNormalizer>(std::move(v));
  }
  fail("{}: unsupported normalizer type '{}' (supported: NFC, NFD, NFKC, NFKD, Sequence)", where, type);
}

std::optional<std::string> special_name(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

void read_special_names(const nlohmann::json& config, std::optional<std::string>& bos, std::optional<std::string>& eos,
                        std::optional<std::string>& pad) {
  if (!config.is_object()) return;
  if (config.contains("bos_token")) bos = special_name(config["bos_token"]);
  if (config.contains("eos_token")) eos = special_name(config["eos_token"]);
  if (config.contains("pad_token")) pad = special_name(config["pad_token"]);
}

HfTokenizer::~HfTokenizer() = default;

namespace {

// model.merges ("a b" or ["a", "b"], byte-level spelled) into bpe's merge ranks, in order.
void read_merges(const nlohmann::json& merges, const std::string& path, ByteBpe& bpe) {
  uint32_t rank = 0;
  for (const auto& e : merges) {
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos) fail("{}: model.merges[{}] '{}' has no space", path, rank, s);
      size_t sp2 = s.find(' ', sp + 1);
      a = s.substr(0, sp);
      b = s.substr(sp + 1, sp2 == std::string::npos ? std::string::npos : sp2 - sp - 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      fail("{}: model.merges[{}] must be \"a b\" or [\"a\", \"b\"]", path, rank);
    }
    auto ab = from_byte_level(a), bb = from_byte_level(b);
    auto ia = ab ? bpe.find(*ab) : std::nullopt, ib = bb ? bpe.find(*bb) : std::nullopt;
    if (!ia || !ib) fail("{}: model.merges[{}] ('{}', '{}'): a part is not in the vocabulary", path, rank, a, b);
    auto im = bpe.find(*ab + *bb);
    if (!im) fail("{}: model.merges[{}] ('{}', '{}'): the merged token is not in the vocabulary", path, rank, a, b);
    bpe.merger().add_merge(*ia, *ib, rank, *im);
    ++rank;
  }
}

// added_tokens: each an id (within reach of the vocabulary's `id_limit`) and its content.
std::vector<AddedToken> read_added_tokens(const nlohmann::json& list, const std::string& path, size_t id_limit) {
  std::vector<AddedToken> out;
  if (!list.is_array()) fail("{}: added_tokens must be an array", path);
  size_t i = 0;
  for (const auto& t : list) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
        !t["content"].is_string())
      fail("{}: added_tokens[{}] needs an integer 'id' and a string 'content'", path, i);
    AddedToken a;
    int64_t id = t["id"].get<int64_t>();
    const int64_t max_id = int64_t(id_limit) + 2 * int64_t(list.size()) + 65536;
    if (id < 0 || id > max_id) fail("{}: added_tokens[{}].id {} is out of range 0..{}", path, i, id, max_id);
    a.id = int32_t(id);
    a.content = t["content"].get<std::string>();
    if (a.content.empty()) fail("{}: added_tokens[{}].content is empty", path, i);
    a.special = t.value("special", false);
    a.lstrip = t.value("lstrip", false);
    a.rstrip = t.value("rstrip", false);
    out.push_back(std::move(a));
    ++i;
  }
  return out;
}

}  // namespace

HfTokenizer::HfTokenizer(std::string_view json_text, const std::string& path, const nlohmann::json& config) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
  if (!j.is_object()) fail("{}: must be a JSON object", path);
  if (!j.contains("model") || !j["model"].is_object()) fail("{}: missing object 'model'", path);
  const auto& m = j["model"];
  const std::string mtype = m.contains("type") && m["type"].is_string() ? m["type"].get<std::string>() : "BPE";
  if (mtype != "BPE") fail("{}: model.type '{}' is not supported (only byte-level BPE)", path, mtype);
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && !m[k].is_null() && !(m[k].is_string() && m[k].get<std::string>().empty()))
      fail("{}: model.{} is not supported", path, k);
  if (m.contains("dropout") && !m["dropout"].is_null() && !(m["dropout"].is_number() && m["dropout"].get<double>() == 0))
    fail("{}: model.dropout is not supported", path);
  if (m.contains("ignore_merges")) {
    if (!m["ignore_merges"].is_boolean()) fail("{}: model.ignore_merges must be true or false", path);
    bpe_.whole_piece_first = m["ignore_merges"].get<bool>();
  }

  // pipeline
  normalizer_ = make_normalizer(j.value("normalizer", nlohmann::json()), path + ": normalizer");
  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null())
    pre_ = make_pre_tokenizer(j["pre_tokenizer"], path + ": pre_tokenizer", RegexDialect::JavaScript);
  if (!pre_ || !pre_->byte_level())
    fail("{}: pre_tokenizer has no ByteLevel step; only byte-level BPE tokenizers are supported", path);
  if (j.contains("decoder") && !j["decoder"].is_null()) {
    const auto& d = j["decoder"];
    if (!d.is_object() || d.value("type", "") != "ByteLevel")
      fail("{}: decoder must be ByteLevel, got {}", path, d.dump().substr(0, 200));
  }

  // vocabulary
  if (!m.contains("vocab") || !m["vocab"].is_object()) fail("{}: model.vocab must be an object", path);
  // ids index dense tables: refuse ids far beyond the number of entries
  const int64_t max_vocab_id = 2 * int64_t(m["vocab"].size()) + 65536;
  for (const auto& [key, val] : m["vocab"].items()) {
    if (!val.is_number_integer() || val.get<int64_t>() < 0 || val.get<int64_t>() > max_vocab_id)
      fail("{}: model.vocab['{}'] must be an integer id in 0..{}", path, key, max_vocab_id);
    auto bytes = from_byte_level(key);
    if (!bpe_.add_token(int32_t(val.get<int64_t>()), bytes ? *bytes : key))
      fail("{}: model.vocab: id {} is used twice", path, val.get<int64_t>());
  }
  std::string missing = bpe_.finish_vocab();
  if (!missing.empty())
    fail("{}: model.vocab lacks {} of the 256 single-byte tokens (byte 0x{:02X} first)", path, missing.size(),
         uint8_t(missing[0]));

  if (!m.contains("merges") || !m["merges"].is_array()) fail("{}: model.merges must be an array", path);
  read_merges(m["merges"], path, bpe_);
  if (j.contains("added_tokens") && !j["added_tokens"].is_null())
    added_ = read_added_tokens(j["added_tokens"], path, bpe_.id_limit());
  size_t limit = bpe_.id_limit();
  for (const auto& a : added_) limit = std::max(limit, size_t(a.id) + 1);
  added_by_id_.assign(limit, nullptr);
  for (const auto& a : added_) {
    added_by_id_[size_t(a.id)] = &a;
    matcher_.add(a.content, a.id);
  }
  id_limit_ = limit;
  read_special_names(config, bos_, eos_, pad_);
}

std::string_view HfTokenizer::token_bytes(int32_t id) const {
  if (id >= 0 && size_t(id) < added_by_id_.size() && added_by_id_[size_t(id)]) return added_by_id_[size_t(id)]->content;
  if (!bpe_.has(id)) fail("token id {} is not in the vocabulary (size {})", id, vocab_size());
  return bpe_.bytes(id);
}

bool HfTokenizer::has_id(int32_t id) const {
  return bpe_.has(id) || (id >= 0 && size_t(id) < added_by_id_.size() && added_by_id_[size_t(id)]);
}

void HfTokenizer::encode_span(std::string_view span, std::vector<int32_t>& out) const {
  if (span.empty()) return;
  std::vector<std::string> pieces;
  pieces.emplace_back(normalizer_ ? normalizer_->apply(std::string(span)) : std::string(span));
  if (pieces[0].empty()) return;
  pre_->apply(pieces);
  for (const auto& p : pieces) bpe_.encode_piece(p, out);
}

std::vector<int32_t> HfTokenizer::encode_ordinary(std::string_view text) const {
  std::string clean = utf8_sanitize(text);
  std::vector<int32_t> out;
  encode_span(clean, out);
  return out;
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
  std::string clean = utf8_sanitize(text);
  std::vector<int32_t> out;
  auto segs = matcher_.split(clean);
  std::string_view s(clean);
  for (size_t k = 0; k < segs.size(); ++k) {
    const auto& g = segs[k];
    if (g.id >= 0) {
      out.push_back(g.id);
      continue;
    }
    std::string_view span = s.substr(g.begin, g.end - g.begin);
    // an added token with rstrip eats whitespace after it, lstrip before it
    if (k > 0 && segs[k - 1].id >= 0 && added_by_id_[size_t(segs[k - 1].id)]->rstrip) span = trim_start(span);
    if (k + 1 < segs.size() && segs[k + 1].id >= 0 && added_by_id_[size_t(segs[k + 1].id)]->lstrip) span = trim_end(span);
    encode_span(span, out);
  }
  return out;
}

}  // namespace sluice::text
