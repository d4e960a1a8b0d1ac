#include "text/tokenizer.h"

#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "text/hf_tokenizer.h"
#include "text/tiktoken_tokenizer.h"
#include "text/utf8.h"
#include "util/error.h"

namespace sluice::text {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json read_json(const std::string& path) {
  std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
}

TiktokenOptions tiktoken_options(const nlohmann::json& cfg, const std::string& cfg_path, size_t base_size) {
  TiktokenOptions o;
  const bool has_pat = cfg.contains("pat_str");
  if (has_pat) {
    if (!cfg["pat_str"].is_string()) fail("{}: field 'pat_str' must be a string", cfg_path);
    o.pattern = cfg["pat_str"].get<std::string>();
  } else {
    o.pattern = kKimiPattern;
  }
  const bool kimi = !has_pat || cfg.value("tokenizer_class", "") == "TikTokenTokenizer";
  o.kimi_chunking = kimi;
  std::map<int64_t, AddedToken> specials;
  if (cfg.contains("added_tokens_decoder")) {
    const auto& d = cfg["added_tokens_decoder"];
    if (!d.is_object()) fail("{}: field 'added_tokens_decoder' must be an object", cfg_path);
    for (const auto& [key, v] : d.items()) {
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(key, &used);
        if (used != key.size()) id = -1;
      } catch (...) {
      }
      if (id < 0 || id > 0x7FFFFFF) fail("{}: added_tokens_decoder key '{}' is not a token id", cfg_path, key);
      if (!v.is_object() || !v.contains("content") || !v["content"].is_string() || v["content"].get<std::string>().empty())
        fail("{}: added_tokens_decoder['{}'] needs a non-empty string 'content'", cfg_path, key);
      AddedToken a;
      a.id = int32_t(id);
      a.content = v["content"].get<std::string>();
      a.special = v.value("special", true);
      specials[id] = std::move(a);
    }
  }
  if (kimi) {
    // tokenization_kimi.py: 256 reserved special ids after the base vocabulary
    for (size_t id = base_size; id < base_size + 256; ++id)
      if (!specials.count(int64_t(id))) {
        AddedToken a;
        a.id = int32_t(id);
        a.content = fmt::format("<|reserved_token_{}|>", id);
        a.special = true;
        specials[int64_t(id)] = std::move(a);
      }
  }
  for (auto& [id, a] : specials) o.specials.push_back(std::move(a));
  read_special_names(cfg, o.bos, o.eos, o.pad);
  return o;
}

size_t count_rank_lines(std::string_view text) {
  size_t n = 0, pos = 0;
  while (pos < text.size()) {
    size_t e = text.find('\n', pos);
    if (e == std::string_view::npos) e = text.size();
    if (e > pos && !(e == pos + 1 && text[pos] == '\r')) ++n;
    pos = e + 1;
  }
  return n;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const std::string tj = model_dir + "/tokenizer.json", tk = model_dir + "/tiktoken.model",
                    tc = model_dir + "/tokenizer_config.json";
  nlohmann::json cfg;
  const bool has_cfg = fs::exists(tc);
  if (has_cfg) {
    cfg = read_json(tc);
    if (!cfg.is_object()) fail("{}: must be a JSON object", tc);
  }
  if (fs::exists(tj)) return std::make_unique<HfTokenizer>(read_file(tj), tj, cfg);
  if (fs::exists(tk)) {
    if (!has_cfg) fail("{}: missing (needed next to tiktoken.model for the special tokens)", tc);
    std::string ranks = read_file(tk);
    // ids are ranks 0..n-1 (checked by the constructor), so n is the line count
    auto opts = tiktoken_options(cfg, tc, count_rank_lines(ranks));
    return std::make_unique<TiktokenTokenizer>(ranks, tk, std::move(opts));
  }
  fail("{}: no tokenizer.json or tiktoken.model: text needs the model's tokenizer files (copy them from the "
       "model's repository; `generate --tokens` runs on token ids without them)",
       model_dir);
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  for (int32_t id : ids) bytes.append(token_bytes(id));
  return utf8_sanitize(bytes);
}

std::optional<int32_t> Tokenizer::token_id(std::string_view content) const {
  for (const auto& a : added_)
    if (a.content == content) return a.id;
  return base_token_id(content);
}

bool Tokenizer::is_special(int32_t id) const {
  for (const auto& a : added_)
    if (a.id == id) return a.special;
  return false;
}

}  // namespace sluice::text
