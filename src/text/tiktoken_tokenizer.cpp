#include "text/tiktoken_tokenizer.h"

#include "text/utf8.h"
#include "util/error.h"

namespace sluice::text {

const char* const kKimiPattern =
    "[\\p{Han}]+"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)"
    "|\\s+";

namespace {

int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool b64_decode(std::string_view s, std::string& out) {
  out.clear();
  if (s.size() % 4 != 0) return false;
  for (size_t i = 0; i < s.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s[i + size_t(k)];
      if (c == '=') {
        if (i + 4 != s.size() || k < 2) return false;
        v[k] = 0;
        ++pad;
      } else {
        if (pad) return false;
        v[k] = b64_value(c);
        if (v[k] < 0) return false;
      }
    }
    uint32_t x = uint32_t(v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3]);
    out += char(x >> 16);
    if (pad < 2) out += char((x >> 8) & 0xFF);
    if (pad < 1) out += char(x & 0xFF);
  }
  return true;
}

// Python str.isspace()
bool py_space(int32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace

std::vector<std::string_view> kimi_chunks(std::string_view text, size_t max_slice, size_t max_run) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < text.size()) {
    // one slice of at most max_slice code points
    size_t slice_start = i, count = 0, len = 0;
    size_t run_len = 0, piece_start = i;
    bool first = true, run_space = false;
    while (i < text.size() && count < max_slice) {
      int32_t cp = utf8_decode(text, i, &len);
      bool sp = py_space(cp);
      if (first) {
        run_space = sp;
        run_len = 1;
        first = false;
      } else if (sp != run_space) {
        run_space = sp;
        run_len = 1;
      } else if (++run_len > max_run) {
        out.push_back(text.substr(piece_start, i - piece_start));
        piece_start = i;
        run_len = 1;
      }
      i += len;
      ++count;
    }
    (void)slice_start;
    out.push_back(text.substr(piece_start, i - piece_start));
  }
  return out;
}

TiktokenTokenizer::TiktokenTokenizer(std::string_view ranks_text, const std::string& path, TiktokenOptions opts) {
  size_t pos = 0, line_no = 0, lines = 0;
  for (char c : ranks_text) lines += c == '\n';
  ++lines;  // ranks are 0..n-1 for n lines, so any rank >= the line count is invalid
  std::string bytes;
  while (pos < ranks_text.size()) {
    size_t e = ranks_text.find('\n', pos);
    if (e == std::string_view::npos) e = ranks_text.size();
    std::string_view line = ranks_text.substr(pos, e - pos);
    pos = e + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    if (sp == std::string_view::npos) fail("{}: line {}: expected 'base64 rank'", path, line_no);
    if (!b64_decode(line.substr(0, sp), bytes) || bytes.empty())
      fail("{}: line {}: invalid base64 token '{}'", path, line_no, line.substr(0, std::min<size_t>(sp, 64)));
    std::string_view rs = line.substr(sp + 1);
    if (rs.empty() || rs.size() > 9) fail("{}: line {}: invalid rank '{}'", path, line_no, rs.substr(0, 16));
    int64_t rank = 0;
    for (char c : rs) {
      if (c < '0' || c > '9') fail("{}: line {}: invalid rank '{}'", path, line_no, rs.substr(0, 16));
      rank = rank * 10 + (c - '0');
    }
    if (size_t(rank) >= lines) fail("{}: line {}: rank {} exceeds the number of lines", path, line_no, rank);
    if (!bpe_.add_token(int32_t(rank), bytes)) fail("{}: line {}: rank {} appears twice", path, line_no, rank);
  }
  base_size_ = bpe_.id_limit();
  if (base_size_ == 0) fail("{}: no tokens", path);
  for (size_t i = 0; i < base_size_; ++i)
    if (!bpe_.has(int32_t(i))) fail("{}: ranks are not contiguous: rank {} is missing", path, i);
  std::string missing = bpe_.finish_vocab();
  if (!missing.empty())
    fail("{}: lacks {} of the 256 single-byte tokens (byte 0x{:02X} first)", path, missing.size(), uint8_t(missing[0]));
  if (bpe_.merger().merge_count() == 0) bpe_.derive_merges_from_vocab();
  bpe_.whole_piece_first = true;

  re_ = std::make_unique<Regex>(opts.pattern, RegexDialect::Rust, path + " pre-tokenizer pattern");
  added_ = std::move(opts.specials);
  id_limit_ = base_size_;
  for (const auto& a : added_) {
    if (a.id < 0 || size_t(a.id) > base_size_ + 2 * added_.size() + 65536)
      fail("{}: special token '{}' has id {} far outside the vocabulary", path, a.content, a.id);
    if (size_t(a.id) < base_size_)
      fail("{}: special token '{}' has id {} inside the base vocabulary", path, a.content, a.id);
    id_limit_ = std::max(id_limit_, size_t(a.id) + 1);
  }
  special_by_id_.assign(id_limit_, nullptr);
  for (const auto& a : added_) {
    if (special_by_id_[size_t(a.id)]) fail("{}: special token id {} defined twice", path, a.id);
    special_by_id_[size_t(a.id)] = &a;
    matcher_.add(a.content, a.id);
  }
  kimi_chunking_ = opts.kimi_chunking;
  bos_ = opts.bos;
  eos_ = opts.eos;
  pad_ = opts.pad;
}

bool TiktokenTokenizer::has_id(int32_t id) const {
  if (id < 0) return false;
  if (size_t(id) < base_size_) return true;
  return size_t(id) < special_by_id_.size() && special_by_id_[size_t(id)];
}

std::string_view TiktokenTokenizer::token_bytes(int32_t id) const {
  if (id >= 0 && size_t(id) < base_size_) return bpe_.bytes(id);
  if (id >= 0 && size_t(id) < special_by_id_.size() && special_by_id_[size_t(id)])
    return special_by_id_[size_t(id)]->content;
  fail("token id {} is not in the vocabulary (size {})", id, vocab_size());
}

void TiktokenTokenizer::encode_ordinary_span(std::string_view text, std::vector<int32_t>& out) const {
  for (auto [b, e] : re_->find_all(text)) bpe_.encode_piece(text.substr(b, e - b), out);
}

void TiktokenTokenizer::encode_chunk(std::string_view text, bool allow_special, std::vector<int32_t>& out) const {
  if (!allow_special || matcher_.empty()) {
    encode_ordinary_span(text, out);
    return;
  }
  for (const auto& g : matcher_.split(text)) {
    if (g.id >= 0)
      out.push_back(g.id);
    else
      encode_ordinary_span(text.substr(g.begin, g.end - g.begin), out);
  }
}

std::vector<int32_t> TiktokenTokenizer::encode_impl(std::string_view text, bool allow_special) const {
  std::string clean = utf8_sanitize(text);
  std::vector<int32_t> out;
  if (kimi_chunking_) {
    for (auto chunk : kimi_chunks(clean)) encode_chunk(chunk, allow_special, out);
  } else {
    encode_chunk(clean, allow_special, out);
  }
  return out;
}

std::vector<int32_t> TiktokenTokenizer::encode(std::string_view text) const { return encode_impl(text, true); }
std::vector<int32_t> TiktokenTokenizer::encode_ordinary(std::string_view text) const {
  return encode_impl(text, false);
}

}  // namespace sluice::text
