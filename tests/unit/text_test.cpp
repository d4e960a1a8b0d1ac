// Tokenizer and template behaviour derived from the specifications (HF
// tokenizers docs, tiktoken/Kimi rules, Unicode maximal-subpart replacement),
// on small hand-built tokenizer files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "text/chat_template.h"
#include "text/jinja.h"
#include "text/pretokenizer.h"
#include "text/regex.h"
#include "text/tiktoken_tokenizer.h"
#include "text/tokenizer.h"
#include "text/utf8.h"
#include "util/error.h"

namespace sluice::text_test {
namespace {

using nlohmann::json;
using Pieces = std::vector<std::string>;

void write(const std::string& path, const std::string& s) { std::ofstream(path, std::ios::binary) << s; }

// ---- UTF-8 ----
TEST(Utf8, SanitizeUsesMaximalSubparts) {
  // Unicode §3.9 example: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> a FFFD FFFD FFFD b FFFD c FFFD FFFD d
  std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(text::utf8_sanitize(in), "a" + r + r + r + "b" + r + "c" + r + r + "d");
  EXPECT_EQ(text::utf8_sanitize("\xED\xA0\x80"), r + r + r);  // surrogate
  EXPECT_EQ(text::utf8_sanitize("\xC0\xAF"), r + r);          // overlong
  EXPECT_EQ(text::utf8_sanitize("ok \xF0\x9F\x98\x80"), "ok \xF0\x9F\x98\x80");
}

TEST(Utf8, CompletePrefixHoldsBackOnlyUnfinishedSequences) {
  EXPECT_EQ(text::utf8_complete_prefix("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(text::utf8_complete_prefix("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(text::utf8_complete_prefix("ab\x80"), 3u);      // stray continuation: not held
  EXPECT_EQ(text::utf8_complete_prefix("ab\xE2\x28"), 4u);  // already ill-formed: not held
  EXPECT_EQ(text::utf8_complete_prefix("\xC3"), 0u);
}

// ---- pre-tokenizers ----
TEST(PreTokenizer, SplitBehaviorsFollowHfDocs) {
  // huggingface tokenizers docs, Split: "the-final--countdown" split on "-"
  text::Regex dash("-", text::RegexDialect::Rust, "test");
  const std::string s = "the-final--countdown";
  using B = text::SplitBehavior;
  EXPECT_EQ(text::split_by_regex(s, dash, B::Removed, false), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(text::split_by_regex(s, dash, B::Isolated, false), (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(text::split_by_regex(s, dash, B::MergedWithPrevious, false), (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(text::split_by_regex(s, dash, B::MergedWithNext, false), (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(text::split_by_regex(s, dash, B::Contiguous, false), (Pieces{"the", "-", "final", "--", "countdown"}));
  // invert: the matches are the pieces' content, the gaps the delimiters
  text::Regex word("[a-z]+", text::RegexDialect::Rust, "test");
  EXPECT_EQ(text::split_by_regex(s, word, B::Removed, true), (Pieces{"the", "final", "countdown"}));
}

TEST(Regex, ClassIntersectionAndDialects) {
  // Kimi: letters except Han
  text::Regex re("[\\p{L}&&[^\\p{Han}]]+", text::RegexDialect::Rust, "test");
  auto m = re.find_all("abc\xE4\xB8\xAD\xE6\x96\x87xyz");  // abc中文xyz
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], std::make_pair(size_t(0), size_t(3)));
  // U+0085 is whitespace for Rust regex, not for JavaScript; U+FEFF the other way round
  text::Regex rs("\\s+", text::RegexDialect::Rust, "t"), js("\\s+", text::RegexDialect::JavaScript, "t");
  EXPECT_EQ(rs.find_all("\xC2\x85").size(), 1u);
  EXPECT_EQ(js.find_all("\xC2\x85").size(), 0u);
  EXPECT_EQ(rs.find_all("\xEF\xBB\xBF").size(), 0u);
  EXPECT_EQ(js.find_all("\xEF\xBB\xBF").size(), 1u);
  EXPECT_THROW(text::Regex("[a-z", text::RegexDialect::Rust, "t"), Error);
}

// ---- a tiny byte-level tokenizer.json ----
// GPT-2 byte->char map for building vocab strings.
std::string byte_char(int b) {
  int n = 0;
  for (int x = 0; x < 256; ++x) {
    bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
    int cp = printable ? x : 256 + n++;
    if (x == b) {
      std::string s;
      text::utf8_append(s, uint32_t(cp));
      return s;
    }
  }
  return "";
}

json tiny_tokenizer(bool pair_merges, bool ignore_merges = false) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  const std::string G = byte_char(' ');
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  vocab[G + "a"] = 258;
  vocab["bc"] = 259;
  // "b c" has a better rank than "a b": "abc" -> a + bc (no merge a+bc exists) unless ignore_merges
  json merges = json::array();
  auto add = [&](const std::string& a, const std::string& b) {
    if (pair_merges)
      merges.push_back(json::array({a, b}));
    else
      merges.push_back(a + " " + b);
  };
  add("b", "c");
  add("a", "b");
  add("ab", "c");
  add(G, "a");
  json j = {{"version", "1.0"},
            {"normalizer", nullptr},
            {"pre_tokenizer",
             {{"type", "Sequence"},
              {"pretokenizers",
               json::array({{{"type", "Split"},
                             {"pattern", {{"Regex", " ?\\p{L}+|\\p{N}|\\s+|[^\\s\\p{L}\\p{N}]+"}}},
                             {"behavior", "Isolated"},
                             {"invert", false}},
                            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"added_tokens",
             json::array({{{"id", 300}, {"content", "<|end|>"}, {"special", true}},
                          {{"id", 301}, {"content", "<|e"}, {"special", false}},
                          {{"id", 302}, {"content", "[R]"}, {"special", false}, {"rstrip", true}}})},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", ignore_merges}}}};
  return j;
}

std::string tiny_dir(const test::TempDir& tmp, const std::string& name, const json& tj, const json& cfg = json::object()) {
  std::string d = tmp.file(name);
  std::filesystem::create_directories(d);
  write(d + "/tokenizer.json", tj.dump());
  write(d + "/tokenizer_config.json", cfg.dump());
  return d;
}

TEST(HfTokenizer, MergeRanksBothFormatsAndIgnoreMerges) {
  test::TempDir tmp;
  auto a = text::Tokenizer::load(tiny_dir(tmp, "a", tiny_tokenizer(false)));
  auto b = text::Tokenizer::load(tiny_dir(tmp, "b", tiny_tokenizer(true)));
  auto c = text::Tokenizer::load(tiny_dir(tmp, "c", tiny_tokenizer(true, true)));
  // "abc": b+c (rank 0) first, then a+bc has no merge -> [a, bc]
  EXPECT_EQ(a->encode("abc"), (std::vector<int32_t>{'a', 259}));
  EXPECT_EQ(b->encode("abc"), a->encode("abc"));
  EXPECT_EQ(a->encode("abab"), (std::vector<int32_t>{256, 256}));
  EXPECT_EQ(c->encode("abc"), (std::vector<int32_t>{257}));  // whole piece is in the vocabulary
  EXPECT_EQ(a->encode(" ab"), (std::vector<int32_t>{' ', 256}));  // " a" (rank 3) vs "a b" (rank 1): a+b first
  EXPECT_EQ(a->encode(" a"), (std::vector<int32_t>{258}));
}

TEST(HfTokenizer, AddedTokensLongestMatchStripAndOrdinary) {
  test::TempDir tmp;
  auto t = text::Tokenizer::load(tiny_dir(tmp, "t", tiny_tokenizer(false), json{{"eos_token", "<|end|>"}}));
  EXPECT_EQ(t->encode("x<|end|>y"), (std::vector<int32_t>{'x', 300, 'y'}));
  EXPECT_EQ(t->encode("<|ex"), (std::vector<int32_t>{301, 'x'}));  // the longer "<|end|>" does not match
  EXPECT_EQ(t->encode("[R]   z"), (std::vector<int32_t>{302, 'z'}));  // rstrip eats the spaces
  auto ord = t->encode_ordinary("<|end|>");
  EXPECT_EQ(std::find(ord.begin(), ord.end(), 300), ord.end());
  EXPECT_EQ(t->decode(ord), "<|end|>");
  EXPECT_EQ(t->eos_id(), std::optional<int32_t>(300));
  EXPECT_TRUE(t->is_special(300));
  EXPECT_FALSE(t->is_special(301));
  EXPECT_EQ(t->vocab_size(), 303);
}

TEST(HfTokenizer, InvalidUtf8IsReplacedNeverFatal) {
  test::TempDir tmp;
  auto t = text::Tokenizer::load(tiny_dir(tmp, "t", tiny_tokenizer(false)));
  for (std::string bad : {std::string("\xFF"), std::string("a\xC3"), std::string("\xED\xA0\x80x"), std::string("\x80\x80")}) {
    auto ids = t->encode(bad);
    EXPECT_EQ(ids, t->encode(text::utf8_sanitize(bad)));
    EXPECT_EQ(t->decode(ids), text::utf8_sanitize(bad));
  }
  EXPECT_THROW(t->decode(std::vector<int32_t>{5000}), Error);
}

TEST(HfTokenizer, MalformedFilesNameTheField) {
  test::TempDir tmp;
  auto j = tiny_tokenizer(false);
  j["model"]["merges"].push_back("zz qq");
  try {
    text::Tokenizer::load(tiny_dir(tmp, "m", j));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.merges[4]"), std::string::npos) << e.what();
  }
  auto k = tiny_tokenizer(false);
  k["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  EXPECT_THROW(text::Tokenizer::load(tiny_dir(tmp, "k", k)), Error);
  EXPECT_THROW(text::Tokenizer::load(tmp.file("missing")), Error);
}

TEST(Utf8Assembler, AssemblesAndReplaces) {
  text::Utf8Assembler a;
  EXPECT_EQ(a.push("\xE4\xBD"), "");
  EXPECT_EQ(a.push("\xA0!"), "\xE4\xBD\xA0!");
  EXPECT_EQ(a.push("\xFF" "a"), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(a.push("\xC3"), "");
  EXPECT_EQ(a.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(text::utf8_sanitize("\xC0\xAF" "ok\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBDok\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(IncrementalDecoder, HoldsPartialUtf8) {
  test::TempDir tmp;
  auto t = text::Tokenizer::load(tiny_dir(tmp, "t", tiny_tokenizer(false)));
  auto ids = t->encode("\xE4\xB8\xAD!");  // 中! as three byte tokens and '!'
  ASSERT_EQ(ids.size(), 4u);
  text::IncrementalDecoder d(*t);
  EXPECT_EQ(d.push(ids[0]), "");
  EXPECT_EQ(d.push(ids[1]), "");
  EXPECT_EQ(d.push(ids[2]), "\xE4\xB8\xAD");
  EXPECT_EQ(d.push(ids[3]), "!");
  EXPECT_EQ(d.push(ids[0]), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
}

// ---- tiktoken / Kimi ----

std::string kimi_dir(const test::TempDir& tmp) {
  std::string d = tmp.file("kimi");
  std::filesystem::create_directories(d);
  std::string ranks;
  int r = 0;
  for (int b = 0; b < 256; ++b) ranks += test::base64(std::string(1, char(b))) + " " + std::to_string(r++) + "\n";
  for (std::string tok : {"he", "ll", "hell", "hello", " w", "or", " wor", " world"})
    ranks += test::base64(tok) + " " + std::to_string(r++) + "\n";
  write(d + "/tiktoken.model", ranks);
  json cfg = {{"tokenizer_class", "TikTokenTokenizer"},
              {"bos_token", "[BOS]"},
              {"eos_token", "<|im_end|>"},
              {"added_tokens_decoder",
               {{std::to_string(r), {{"content", "[BOS]"}, {"special", true}}},
                {std::to_string(r + 2), {{"content", "<|im_end|>"}, {"special", true}}}}}};
  write(d + "/tokenizer_config.json", cfg.dump());
  return d;
}

TEST(Tiktoken, KimiSpecialsReservedAndRankMerging) {
  test::TempDir tmp;
  auto t = text::Tokenizer::load(kimi_dir(tmp));
  const int base = 264;
  EXPECT_EQ(t->vocab_size(), base + 256);
  EXPECT_EQ(t->token_id("<|reserved_token_265|>"), std::optional<int32_t>(base + 1));
  EXPECT_EQ(t->bos_id(), std::optional<int32_t>(base));
  EXPECT_EQ(t->eos_id(), std::optional<int32_t>(base + 2));
  EXPECT_EQ(t->encode("hello world"), (std::vector<int32_t>{259, 263}));
  // "hellx": he(256) + ll(257) -> hell(258) + x
  EXPECT_EQ(t->encode("hellx"), (std::vector<int32_t>{258, 'x'}));
  EXPECT_EQ(t->encode("a<|im_end|>"), (std::vector<int32_t>{'a', base + 2}));
  auto ord = t->encode_ordinary("<|im_end|>");
  EXPECT_EQ(std::find(ord.begin(), ord.end(), base + 2), ord.end());  // special tokens stay text in user content
  EXPECT_EQ(t->decode(ord), "<|im_end|>");
  // Han runs split from Latin letters (Kimi pattern's first alternative and && rewrite)
  auto ids = t->encode("ab\xE4\xB8\xAD");
  EXPECT_EQ(t->decode(ids), "ab\xE4\xB8\xAD");
}

TEST(Tiktoken, KimiChunksSplitLongRuns) {
  std::string s = std::string(25003, 'a') + "  " + std::string(10, 'b');
  auto c = text::kimi_chunks(s);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].size(), 25000u);
  EXPECT_EQ(c[1].size(), s.size() - 25000);
  auto d = text::kimi_chunks(std::string(10, 'x'), 4, 25000);  // 400k-slice rule, scaled down
  EXPECT_EQ(d.size(), 3u);
}

// ---- Jinja ----
std::string render(const std::string& t, const json& ctx = json::object()) { return text::jinja::Template(t).render(ctx); }

// Found by jinja_template_fuzz (UBSan: a 127-digit literal cast to int64).
TEST(Jinja, IntegerLiteralsAreExactOrAnError) {
  EXPECT_EQ(render("{{ 9007199254740992 }}"), "9007199254740992");
  EXPECT_THROW(render("{{ 9007199254740994 }}"), Error);
  EXPECT_THROW(render("{{ 33333333333333333333333333333333333333333 }}"), Error);
}

// Found by scripts/fuzz.sh (ASan): a macro calling itself overflowed the stack before the
// depth limit of 1,000 nested evaluations was reached (eval_inner's frame is ~8 KiB under ASan).
// The limit holds now: an error naming the line, not a crash; moderate nesting still renders.
TEST(Jinja, RecursionIsAnErrorNotACrash) {
  try {
    render("\n{% macro m(n) %}[{{ m(n) }}]{% endmacro %}{{ m(1) }}");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("recursion too deep"), std::string::npos) << e.what();
  }
  EXPECT_EQ(render("{% macro d(n) %}{% if n > 0 %}({{ d(n - 1) }}){% endif %}{% endmacro %}{{ d(20) }}"),
            std::string(20, '(') + std::string(20, ')'));
}

TEST(Jinja, StatementsExpressionsAndFilters) {
  EXPECT_EQ(render("{% for m in xs[::-1] %}{{ loop.index }}{{ m }}{% if not loop.last %},{% endif %}{% endfor %}",
                   {{"xs", {"a", "b", "c"}}}),
            "1c,2b,3a");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for x in xs if x > 1 %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}",
                   {{"xs", {1, 2, 3}}}),
            "5");
  EXPECT_EQ(render("{% macro f(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(2, b='x') }}"), "[1B][2x]");
  EXPECT_EQ(render("{{ d | tojson }}|{{ d | tojson(indent=2) }}", {{"d", {{"a", 1}, {"b", {true, nullptr}}}}}),
            "{\"a\": 1, \"b\": [true, null]}|{\n  \"a\": 1,\n  \"b\": [\n    true,\n    null\n  ]\n}");
  EXPECT_EQ(render("{{ '  x ' | trim }}|{{ 'a,b,c'.split(',') | join('-') }}|{{ 'Hi'.startswith('H') }}|{{ xs | length }}",
                   {{"xs", {1, 2}}}),
            "x|a-b-c|true|2");
  EXPECT_EQ(render("{%- if x is defined -%}  d  {%- else -%}  u  {%- endif -%}"), "u");
  EXPECT_EQ(render("{{ y | default('dflt') }}{{ 'a' if z else 'b' }}"), "dfltb");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"x", 1}, {"y", 2}}}}), "x=1;y=2;");
  EXPECT_EQ(render("a\n{% if true %}\n  b\n{% endif %}\nc\n"), "a\n  b\nc");  // trim_blocks + lstrip_blocks
}

TEST(Jinja, ErrorsNameTheTemplateLine) {
  auto expect_line = [](const std::string& t, const std::string& line) {
    try {
      render(t);
      FAIL() << "expected an error for " << t;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("template line " + line), std::string::npos) << e.what();
    }
  };
  expect_line("a\nb\n{% frobnicate %}", "3");
  expect_line("x\n{{ raise_exception('bad role') }}", "2");
  expect_line("\n\n{{ 'a' | no_such_filter }}", "3");
  expect_line("{% for x in xs %}\n{{ x }}", "1");
  expect_line("\n{{ 1 + }}", "2");
}

TEST(ChatTemplate, LoadsFromConfigOrJinjaFile) {
  test::TempDir tmp;
  std::string d = tmp.file("m");
  std::filesystem::create_directories(d);
  write(d + "/chat_template.jinja",
        "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}\n");
  write(d + "/tokenizer_config.json", json{{"bos_token", "<s>"}}.dump());
  auto t = text::ChatTemplate::load(d);
  json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  EXPECT_EQ(t.render(msgs, nullptr, true), "<s><user>hi<assistant>");
  EXPECT_EQ(t.render(msgs, nullptr, false), "<s><user>hi");
  write(d + "/tokenizer_config.json", json{{"chat_template", "{{ messages | length }}"}}.dump());
  EXPECT_EQ(text::ChatTemplate::load(d).render(msgs), "1");
  write(d + "/tokenizer_config.json", json{{"chat_template", "{% if %}"}}.dump());
  EXPECT_THROW(text::ChatTemplate::load(d), Error);
}

// ---- CLI ----
TEST(CliText, TokenizeTextJsonlAndDecode) {
  test::TempDir tmp;
  std::string d = tiny_dir(tmp, "t", tiny_tokenizer(false));
  auto r = test::run_sluice({"tokenize", "--model", d, "--text", "abab<|end|>"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[256,256,300]\n");
  write(tmp.file("in.jsonl"), "\"abc\"\n\"\\u4e2d\"\n\"\"\n");
  r = test::run_sluice({"tokenize", "--model", d, "--jsonl", tmp.file("in.jsonl")});
  EXPECT_EQ(r.out, "[97,259]\n[228,184,173]\n[]\n") << r.err;
  r = test::run_sluice({"tokenize", "--model", d, "--decode", "97,259,300"});
  EXPECT_EQ(r.out, "\"abc<|end|>\"\n");
  write(tmp.file("bad.jsonl"), "\"ok\"\n[1]\n");
  r = test::run_sluice({"tokenize", "--model", d, "--jsonl", tmp.file("bad.jsonl")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("line 2"), std::string::npos) << r.err;
}

TEST(CliText, GeneratePromptAndChatStreamDecodedText) {
  test::TempDir tmp;
  json cfg = {{"chat_template", "{% for m in messages %}<|end|>{{ m.content }}{% endfor %}{% if add_generation_prompt %}[R]{% endif %}"}};
  std::string d = tiny_dir(tmp, "t", tiny_tokenizer(false), cfg);
  const std::string model = test::fixture("golden/qwen3_moe_tiny");
  auto ids = text::Tokenizer::load(d);
  // --prompt: same continuation as --tokens with the encoded prompt, printed as text
  auto p = ids->encode("abc");
  std::string list;
  for (size_t i = 0; i < p.size(); ++i) list += (i ? "," : "") + std::to_string(p[i]);
  auto r_ids = test::run_sluice({"generate", "--model", model, "--tokens", list, "--max-new", "6", "--ignore-eos"});
  ASSERT_EQ(r_ids.exit_code, 0) << r_ids.err;
  auto gen = json::parse(r_ids.out).get<std::vector<int32_t>>();
  bool in_vocab = true;
  for (int32_t id : gen) in_vocab = in_vocab && ids->valid_id(id);
  auto r_txt = test::run_sluice({"generate", "--model", model, "--tokenizer", d, "--prompt", "abc", "--max-new", "6",
                                 "--ignore-eos"});
  if (in_vocab) {
    ASSERT_EQ(r_txt.exit_code, 0) << r_txt.err;
    EXPECT_EQ(r_txt.out, ids->decode(gen) + "\n");
  } else {
    EXPECT_EQ(r_txt.exit_code, 1);
    EXPECT_NE(r_txt.err.find("not in the tokenizer's vocabulary"), std::string::npos) << r_txt.err;
  }
  // --chat renders the template first: "<|end|>abc[R]"
  auto chat = ids->encode("<|end|>abc[R]");
  list.clear();
  for (size_t i = 0; i < chat.size(); ++i) list += (i ? "," : "") + std::to_string(chat[i]);
  auto c_ids = test::run_sluice({"generate", "--model", model, "--tokens", list, "--max-new", "4", "--ignore-eos"});
  auto c_txt = test::run_sluice({"generate", "--model", model, "--tokenizer", d, "--prompt", "abc", "--chat", "--max-new",
                                 "4", "--ignore-eos"});
  auto cgen = json::parse(c_ids.out).get<std::vector<int32_t>>();
  bool cin = true;
  for (int32_t id : cgen) cin = cin && ids->valid_id(id);
  if (cin) {
    EXPECT_EQ(c_txt.out, ids->decode(cgen) + "\n") << c_txt.err;
  }
  auto bad = test::run_sluice({"generate", "--model", model, "--chat", "--max-new", "1", "--tokens", "1"});
  EXPECT_NE(bad.exit_code, 0);
}

// generate --chat renders through the conversation layer: --reasoning-effort reaches a
// Jinja template as reasoning_effort, and none (or --no-think) also as enable_thinking=false.
TEST(CliText, GenerateChatPassesReasoningEffortToTheTemplate) {
  test::TempDir tmp;
  json cfg = {{"chat_template",
               "{% for m in messages %}<|end|>{{ m.content }}{% endfor %}[R]"
               "{% if reasoning_effort is defined %}{{ reasoning_effort }}{% endif %}"
               "{% if enable_thinking is defined and not enable_thinking %}X{% endif %}"}};
  std::string d = tiny_dir(tmp, "t", tiny_tokenizer(false), cfg);
  const std::string model = test::fixture("golden/qwen3_moe_tiny");
  auto tok = text::Tokenizer::load(d);
  auto ids_of = [&](const std::string& rendered) {
    std::string list;
    for (int32_t id : tok->encode(rendered)) list += (list.empty() ? "" : ",") + std::to_string(id);
    auto r = test::run_sluice({"generate", "--model", model, "--tokens", list, "--max-new", "5", "--ignore-eos"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out).get<std::vector<int32_t>>();
  };
  auto chat_text = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"generate", "--model", model, "--tokenizer", d, "--prompt", "abc",
                                     "--chat", "--max-new", "5", "--ignore-eos"};
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_sluice(args);
  };
  struct Case {
    std::vector<std::string> args;
    std::string rendered;
  };
  // The options change the last tokens of the prompt, and the tiny model continues those
  // differently (checked here, so a lost enable_thinking cannot pass unnoticed).
  ASSERT_NE(ids_of("<|end|>abc[R]noneX"), ids_of("<|end|>abc[R]none"));
  for (const Case& c : {Case{{}, "<|end|>abc[R]"}, Case{{"--no-think"}, "<|end|>abc[R]noneX"},
                        Case{{"--reasoning-effort", "none"}, "<|end|>abc[R]noneX"},
                        Case{{"--reasoning-effort", "high"}, "<|end|>abc[R]high"}}) {
    const auto gen = ids_of(c.rendered);
    bool in_vocab = true;
    for (int32_t id : gen) in_vocab = in_vocab && tok->valid_id(id);
    auto r = chat_text(c.args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // Ids beyond this tokenizer decode to nothing through the codec.
    std::vector<int32_t> shown;
    for (int32_t id : gen)
      if (tok->valid_id(id)) shown.push_back(id);
    EXPECT_EQ(r.out, tok->decode(shown) + "\n") << c.rendered << (in_vocab ? "" : " (some ids outside the tokenizer)");
  }
  // Options that only mean something with --chat, and contradictions, are refused.
  auto no_chat = test::run_sluice({"generate", "--model", model, "--tokenizer", d, "--prompt", "abc", "--no-think"});
  EXPECT_EQ(no_chat.exit_code, 1);
  EXPECT_NE(no_chat.err.find("need --chat"), std::string::npos) << no_chat.err;
  auto both = chat_text({"--no-think", "--reasoning-effort", "high"});
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_NE(both.err.find("contradicts"), std::string::npos) << both.err;
}

}  // namespace
}  // namespace sluice::text_test

namespace sluice::text_test {
namespace {

// The shipped model has its own tokenizer: --prompt/--chat must print exactly
// the decoded greedy continuation that --tokens gives for the encoded prompt,
// without the stop token.
TEST(CliText, GenerateTextWithShippedModel) {
  const std::string model = std::string(SLUICE_FIXTURES) + "/../../models/sluice-k3-mini";
  ASSERT_TRUE(std::filesystem::exists(model + "/tokenizer.json")) << model;
  auto tok = text::Tokenizer::load(model);
  auto tmpl = text::ChatTemplate::load(model);
  for (bool chat : {false, true}) {
    const std::string prompt = "And God said";
    std::string rendered = chat ? tmpl.render(json::array({{{"role", "user"}, {"content", prompt}}})) : prompt;
    auto ids = tok->encode(rendered);
    std::string list;
    for (size_t i = 0; i < ids.size(); ++i) list += (i ? "," : "") + std::to_string(ids[i]);
    auto r_ids = test::run_sluice({"generate", "--model", model, "--tokens", list, "--max-new", "40"});
    ASSERT_EQ(r_ids.exit_code, 0) << r_ids.err;
    auto gen = json::parse(r_ids.out).get<std::vector<int32_t>>();
    if (!gen.empty() && (gen.back() == *tok->eos_id() || gen.back() == *tok->token_id("<|endoftext|>"))) gen.pop_back();
    if (chat) {  // a rendered conversation's reply also ends at the end-of-turn marker
      const auto end_turn = tok->token_id("<|im_end|>");
      ASSERT_TRUE(end_turn.has_value());
      if (auto at = std::find(gen.begin(), gen.end(), *end_turn); at != gen.end()) gen.erase(at, gen.end());
    }
    std::vector<std::string> args = {"generate", "--model", model, "--prompt", prompt, "--max-new", "40"};
    if (chat) args.push_back("--chat");
    auto r_txt = test::run_sluice(args);
    ASSERT_EQ(r_txt.exit_code, 0) << r_txt.err;
    EXPECT_EQ(r_txt.out, tok->decode(gen) + "\n") << (chat ? "--chat" : "--prompt");
    EXPECT_GT(r_txt.out.size(), 10u);
  }
}

}  // namespace
}  // namespace sluice::text_test
