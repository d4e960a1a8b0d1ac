// The JSON-object prefix recogniser behind response_format json_object.
#include <gtest/gtest.h>

#include "server/json_prefix.h"

namespace sluice::server {
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
}  // namespace sluice::server
