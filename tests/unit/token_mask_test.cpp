// chat/token_mask.h: the whole-vocabulary walk gives, for every token, what
// GrammarCursor::allows says of its bytes, at every point of a generation.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "chat/output_grammar.h"
#include "chat/token_mask.h"

namespace sluice::chat {
namespace {
using nlohmann::json;

// A vocabulary of given byte strings (only token_bytes is asked of it).
class BytesCodec : public ChatCodec {
 public:
  explicit BytesCodec(std::vector<std::string> v) : v_(std::move(v)) {}
  std::string describe() const override { return "test vocabulary"; }
  std::vector<int32_t> render_chat(const json&, const json&, const ChatOptions&) const override { throw std::logic_error("unused"); }
  std::vector<int32_t> encode(const std::string&, bool) const override { throw std::logic_error("unused"); }
  std::unique_ptr<Detokenizer> detokenizer() const override { throw std::logic_error("unused"); }
  std::string token_bytes(int32_t id) const override { return v_[size_t(id)]; }
  std::vector<int32_t> stop_ids() const override { return {}; }
  ReplySyntax reply_syntax(const std::vector<int32_t>&) const override { return {}; }

 private:
  std::vector<std::string> v_;
};

// Every byte alone, an empty token, duplicates, tokens that are prefixes of
// others, and random JSON-ish pieces up to 9 bytes.
std::vector<std::string> test_vocabulary(std::mt19937_64& rng) {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, char(b)));
  v.push_back("");
  for (const char* s : {"{\"", "\"", "\":", "\": \"", "\",", "}", "]}", "city", "\"city\"", "\"city\": \"", "days",
                        "unit", "true", "false", "null", "12", "123", "-1", "1.5e3", "  ", "\n", "{\"city", "\"}", "\"}"})
    v.push_back(s);
  const std::string alphabet = "{}[]\":, \n0123456789-.eEcityfdaysunitagsbcxyz\\u\xc3\xa9";
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    for (size_t n = 1 + rng() % 9; n > 0; --n) s += alphabet[rng() % alphabet.size()];
    v.push_back(s);
  }
  return v;
}

void expect_same_masks(const std::shared_ptr<const Grammar>& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const BytesCodec codec(test_vocabulary(rng));
  const int64_t vocab = int64_t(test_vocabulary(rng).size());
  const auto index = VocabByBytes::of(codec, vocab);
  GrammarCursor c(g);
  int64_t checked = 0, allowed_seen = 0;
  for (int step = 0; step < 60 && !c.dead(); ++step) {
    const std::vector<char> mask = index->allowed(c);
    ASSERT_EQ(int64_t(mask.size()), vocab);
    std::vector<int32_t> ok;
    for (int32_t t = 0; t < vocab; ++t) {
      const bool want = c.allows(codec.token_bytes(t));
      ASSERT_EQ(mask[size_t(t)] != 0, want) << "step " << step << ", token " << t << " '" << codec.token_bytes(t) << "'";
      if (want) ok.push_back(t);
      ++checked;
    }
    allowed_seen += int64_t(ok.size());
    if (ok.empty()) break;
    // A token after which the output can go on, where there is one (a random
    // pick closes a JSON object within a few steps).
    std::shuffle(ok.begin(), ok.end(), rng);
    int32_t next = ok[0];
    for (int32_t t : ok) {
      GrammarCursor after = c;
      if (after.feed(codec.token_bytes(t)) && after.can_continue()) {
        next = t;
        break;
      }
    }
    ASSERT_TRUE(c.feed(codec.token_bytes(next)));
  }
  EXPECT_GT(checked, 20 * vocab);  // the walk went on for a while
  EXPECT_GT(allowed_seen, 20);
}

TEST(TokenMask, TheWalkAllowsWhatTheCursorAllowsForASchema) {
  const json schema = json::parse(R"({"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 12}, "days": {"type": "integer"},
      "unit": {"enum": ["c", "f"]}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}},
      "required": ["city", "days"]})");
  for (uint64_t seed : {1, 2, 3}) {
    SCOPED_TRACE(seed);
    expect_same_masks(json_schema_grammar(schema, "arguments"), seed);
  }
}

TEST(TokenMask, TheWalkAllowsWhatTheCursorAllowsForAnyJsonObject) {
  for (uint64_t seed : {4, 5}) {
    SCOPED_TRACE(seed);
    expect_same_masks(json_object_grammar(), seed);
  }
}

TEST(TokenMask, OneIndexPerCodecAndVocabularySize) {
  std::mt19937_64 rng(9);
  const BytesCodec codec(test_vocabulary(rng));
  const auto a = VocabByBytes::of(codec, 300), b = VocabByBytes::of(codec, 300), c = VocabByBytes::of(codec, 200);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(a.get(), c.get());
  EXPECT_EQ(c->vocab(), 200);
}

}  // namespace
}  // namespace sluice::chat
