// The shared JSON nesting bound (util/json_depth.h, issue 38 finding 1): the
// text scan counts only brackets outside strings, the value walk needs no
// recursion (a value 100,000 deep is measured without overflowing the stack).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "util/json_depth.h"

namespace sluice::json_depth_test {
namespace {

TEST(JsonDepth, TextScanCountsBracketsOutsideStrings) {
  EXPECT_EQ(json_text_depth("1"), 0);
  EXPECT_EQ(json_text_depth("{}"), 1);
  EXPECT_EQ(json_text_depth(R"({"a": [1, {"b": []}], "c": {}})"), 4);
  EXPECT_EQ(json_text_depth(R"({"a": "[[[{{{", "b": "\"[[["})"), 1);
  EXPECT_EQ(json_text_depth(R"(["\\", [[]]])"), 3);
  EXPECT_EQ(json_text_depth(std::string(100000, '[')), 100000);
  EXPECT_NO_THROW(check_json_text_depth(std::string(kMaxJsonDepth, '['), "x"));
  try {
    check_json_text_depth(std::string(kMaxJsonDepth + 1, '['), "the arguments");
    FAIL();
  } catch (const JsonTooDeep& e) {
    EXPECT_STREQ(e.what(), "the arguments is nested deeper than 64 levels (the limit)");
  }
}

TEST(JsonDepth, ValueWalkHasNoRecursion) {
  nlohmann::json j = nlohmann::json::parse(std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_TRUE(json_deeper_than(j, kMaxJsonDepth));
  EXPECT_THROW(check_json_depth(j, "x"), JsonTooDeep);
  const auto ok = nlohmann::ordered_json::parse(R"({"a": [[{"b": 1}]]})");
  EXPECT_FALSE(json_deeper_than(ok, 4));
  EXPECT_TRUE(json_deeper_than(ok, 3));
  EXPECT_FALSE(json_deeper_than(nlohmann::json(5), 0));
}

}  // namespace
}  // namespace sluice::json_depth_test
