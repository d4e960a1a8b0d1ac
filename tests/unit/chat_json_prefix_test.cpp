// The JSON-object prefix recogniser behind response_format json_object.
#include <gtest/gtest.h>

#include "chat/json_prefix.h"

namespace sluice::chat::chat_json_prefix_test {
namespace {

bool prefix_ok(const std::string& s) { return JsonPrefix().feed(s); }
bool whole(const std::string& s) {
  JsonPrefix p;
  return p.feed(s) && p.complete();
}

TEST(JsonPrefix, AcceptsObjectsAndTheirPrefixes) {
  const std::string doc =
      R"( {"a": [1, -2.5e+3, 0, true, false, null, "x\"\u00e9\n"], "b": {"c": {}}, "d": [], "e": "é"} )";
  EXPECT_TRUE(whole(doc));
  for (size_t n = 0; n <= doc.size(); ++n) EXPECT_TRUE(prefix_ok(doc.substr(0, n))) << doc.substr(0, n);
  EXPECT_TRUE(whole("{}"));
  EXPECT_FALSE(whole("{\"a\":1"));
}

TEST(JsonPrefix, RejectsWhatCannotContinue) {
  for (const char* bad : {"[", "1", "\"s\"", "{a", "{\"a\" 1", "{\"a\":01", "{\"a\":1.}", "{\"a\":-}", "{\"a\":tru}",
                          "{\"a\":\"\\x\"}", "{\"a\":\"\\u12G4\"}", "{\"a\":1,}", "{}x", "{\"a\":[1,]}", "{\"a\":1]",
                          "{\"a\":\"\x01\"}", "{,"})
    EXPECT_FALSE(prefix_ok(bad)) << bad;
}

// Found by json_prefix_fuzz: bytes that are not UTF-8 inside a string made a
// "complete" object that nlohmann::json (and RFC 8259) refuses.
TEST(JsonPrefix, StringsAreUtf8) {
  for (const char* good : {"{\"k\":\"\xc3\xa9\"}", "{\"k\":\"\xe2\x82\xac\"}", "{\"k\":\"\xf0\x9f\x98\x80\"}",
                           "{\"\xed\x9f\xbf\":1}", "{\"k\":\"\xf4\x8f\xbf\xbf\"}"})
    EXPECT_TRUE(whole(good)) << good;
  for (const char* bad : {"{\"k\":\"\xbb", "{\"k\":\"\xc0\xaf", "{\"k\":\"\xc3\"", "{\"k\":\"\xe0\x80",
                          "{\"k\":\"\xed\xa0", "{\"k\":\"\xf0\x80", "{\"k\":\"\xf4\x90", "{\"k\":\"\xf5", "{\"k\":\"\xff"})
    EXPECT_FALSE(prefix_ok(bad)) << bad;
  EXPECT_TRUE(prefix_ok("{\"k\":\"\xf0\x9f"));  // an incomplete sequence is a prefix
}

// Found by json_prefix_fuzz: a lone \uDDDD escape made a "complete" object that
// nlohmann::json refuses (no Unicode text holds a lone surrogate).
TEST(JsonPrefix, EscapedSurrogatesComeInPairs) {
  for (const char* good : {R"({"k":"\ud83d\ude00"})", R"({"k":"\uD7FF\uE000\uFFFF"})", R"({"\uDBFF\uDFFF":1})"})
    EXPECT_TRUE(whole(good)) << good;
  for (const char* bad : {R"({"k":"\uDDDD"})", R"({"k":"\uDC)", R"({"k":"\ud83d")", R"({"k":"\ud83dx)",
                          R"({"k":"\ud83d\n)", R"({"k":"\ud83d\u0041)", R"({"k":"\ud83d\uE)", R"({"k":"\ud83d\ud83d)"})
    EXPECT_FALSE(prefix_ok(bad)) << bad;
  // Prefixes that can still become a pair are kept.
  for (const char* open : {R"({"k":"\uD)", R"({"k":"\ud83d)", R"({"k":"\ud83d\)", R"({"k":"\ud83d\uD)"})
    EXPECT_TRUE(prefix_ok(open)) << open;
}

TEST(JsonPrefix, NumbersEndAtTheNextByte) {
  EXPECT_TRUE(whole("{\"n\":10}"));
  EXPECT_TRUE(whole("{\"n\":[0,1e5,2E-1]}"));
  EXPECT_FALSE(prefix_ok("{\"n\":1e}"));
  EXPECT_TRUE(prefix_ok("{\"n\":1e"));  // may still become 1e5
}

TEST(JsonPrefix, DepthIsBounded) {
  std::string deep = "{\"a\":";
  for (int i = 0; i < 100; ++i) deep += "[";
  EXPECT_FALSE(prefix_ok(deep));
}

}  // namespace
}  // namespace sluice::chat::chat_json_prefix_test
