#include "util/json_integer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace sluice::json_integer_test {
namespace {

using nlohmann::json;

TEST(JsonInteger, IntegersThatFitAreRead) {
  EXPECT_EQ(json_integer<uint64_t>(json(18446744073709551615ull)), 18446744073709551615ull);
  EXPECT_EQ(json_integer<int64_t>(json(-9223372036854775807ll - 1)), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(json_integer<int32_t>(json(-2147483648ll)), -2147483648);
  EXPECT_EQ(json_integer<int32_t>(json(2147483647)), 2147483647);
  EXPECT_EQ(json_integer<uint8_t>(json(255)), 255);
}

TEST(JsonInteger, IntegersOutOfRangeAreNot) {
  EXPECT_FALSE(json_integer<uint64_t>(json(-1)));
  EXPECT_FALSE(json_integer<int32_t>(json(2147483648ll)));
  EXPECT_FALSE(json_integer<int32_t>(json(-2147483649ll)));
  EXPECT_FALSE(json_integer<int64_t>(json(18446744073709551615ull)));
  EXPECT_FALSE(json_integer<uint8_t>(json(256)));
}

TEST(JsonInteger, FloatsOnlyWhenAskedAndIntegralAndInRange) {
  EXPECT_FALSE(json_integer<int64_t>(json(2.0)));
  EXPECT_EQ(json_integer<int64_t>(json(2.0), true), 2);
  EXPECT_EQ(json_integer<int64_t>(json(-1e3), true), -1000);
  EXPECT_FALSE(json_integer<int64_t>(json(2.5), true));
  EXPECT_FALSE(json_integer<uint64_t>(json(-1.0), true));
  EXPECT_FALSE(json_integer<uint64_t>(json(1e30), true));
  EXPECT_FALSE(json_integer<int64_t>(json(9223372036854775808.0), true));  // 2^63
  EXPECT_EQ(json_integer<int64_t>(json(-9223372036854775808.0), true), std::numeric_limits<int64_t>::min());
  EXPECT_FALSE(json_integer<int32_t>(json(std::nan("")), true));
  EXPECT_FALSE(json_integer<int32_t>(json(std::numeric_limits<double>::infinity()), true));
}

TEST(JsonInteger, OtherTypesAreNot) {
  EXPECT_FALSE(json_integer<int32_t>(json("1")));
  EXPECT_FALSE(json_integer<int32_t>(json(true)));
  EXPECT_FALSE(json_integer<int32_t>(json(nullptr)));
  EXPECT_FALSE(json_integer<int32_t>(json::array({1})));
}

}  // namespace
}  // namespace sluice::json_integer_test
