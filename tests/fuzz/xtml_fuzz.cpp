// Fuzz target: Kimi K3's XTML chat format on a K3-shaped tokenizer. Mode 0:
// generated ids (two bytes each, often the format's special ids) through the
// reply parser, which returns a reply or throws sluice::Error. Mode 1: a JSON
// conversation through the renderer: special-token text in messages must stay
// text, so the encoded ids hold exactly the trusted segments' markers.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"
#include "text/xtml.h"
#include "util/error.h"
#include "util/json_depth.h"

namespace {

std::string b64(const std::string& s) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string o;
  size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    const unsigned v = (unsigned char)s[i] << 16 | (unsigned char)s[i + 1] << 8 | (unsigned char)s[i + 2];
    o += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], t[v & 63]};
  }
  if (i + 1 == s.size()) {
    const unsigned v = (unsigned char)s[i] << 16;
    o += {t[v >> 18], t[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == s.size()) {
    const unsigned v = (unsigned char)s[i] << 16 | (unsigned char)s[i + 1] << 8;
    o += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], '='};
  }
  return o;
}

int g_base = 0;  // first special id

// Byte ranks plus a few merges; [BOS] [EOS] <|end_of_msg|> <|open|> <|close|> <|sep|> after them.
std::unique_ptr<sluice::text::Tokenizer> make_tokenizer() {
  const std::string d = (std::filesystem::temp_directory_path() / ("xtml_fuzz_" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(d);
  std::string ranks;
  int r = 0;
  for (int b = 0; b < 256; ++b) ranks += b64(std::string(1, char(b))) + " " + std::to_string(r++) + "\n";
  for (std::string tok : {"me", "ss", "age", "mess", "message", "ro", "le", "role", "=\"", "\"", "th", "ink", "think"})
    ranks += b64(tok) + " " + std::to_string(r++) + "\n";
  std::ofstream(d + "/tiktoken.model") << ranks;
  g_base = r;
  auto id = [&](int off) { return std::to_string(r + off); };
  nlohmann::json cfg = {{"tokenizer_class", "TikTokenTokenizer"},
                        {"eos_token", "<|end_of_msg|>"},
                        {"added_tokens_decoder",
                         {{id(0), {{"content", "[BOS]"}, {"special", true}}},
                          {id(1), {{"content", "[EOS]"}, {"special", true}}},
                          {id(2), {{"content", "<|end_of_msg|>"}, {"special", true}}},
                          {id(3), {{"content", "<|open|>"}, {"special", true}}},
                          {id(4), {{"content", "<|close|>"}, {"special", true}}},
                          {id(5), {{"content", "<|sep|>"}, {"special", true}}}}}};
  std::ofstream(d + "/tokenizer_config.json") << cfg.dump();
  auto tok = sluice::text::Tokenizer::load(d);
  std::filesystem::remove_all(d);
  return tok;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tok = make_tokenizer();
  if (size < 1) return 0;
  if (data[0] % 2 == 0) {
    std::vector<int32_t> ids;
    for (size_t i = 1; i + 1 < size; i += 2) {
      const int v = data[i] | data[i + 1] << 8;
      ids.push_back(v % 4 == 0 ? g_base + 2 + (v >> 2) % 4 : (v >> 2) % g_base);
    }
    try {
      (void)sluice::text::xtml_parse_reply(*tok, ids, data[0] & 2);
    } catch (const sluice::Error&) {
    }
    return 0;
  }
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  if (!j.is_object()) return 0;
  // A conversation comes from a request body, which the server parses only up to the shared
  // depth (a deeper value is copied recursively below); arguments strings are not bounded here.
  if (sluice::json_deeper_than(j, sluice::kMaxJsonDepth)) return 0;
  sluice::text::XtmlOptions o;
  o.thinking = data[0] & 2;
  std::vector<sluice::text::XtmlSegment> segs;
  try {
    segs = sluice::text::xtml_render(j.value("messages", nlohmann::ordered_json()), j.value("tools", nlohmann::ordered_json()), o);
  } catch (const sluice::Error&) {
    return 0;
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  size_t markers = 0;
  for (const auto& s : segs)
    if (s.trusted)
      for (const char* m : {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"}) markers += count(s.text, m);
  size_t special = 0;
  for (int32_t id : sluice::text::xtml_encode(*tok, segs)) special += id >= g_base;
  if (special != markers) __builtin_trap();  // message text became a special token, or a marker did not
  return 0;
}
