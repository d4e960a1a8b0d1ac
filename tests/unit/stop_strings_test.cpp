// Stop strings over streamed text: cut before the stop, hold back partial
// matches, release them when they turn out not to be a stop.
#include <gtest/gtest.h>

#include "runtime/stop_strings.h"

namespace sluice::stop_strings_test {
namespace {

std::string feed(StopMatcher& m, const std::vector<std::string>& pieces, std::vector<std::string>* released = nullptr) {
  std::string out;
  for (const auto& p : pieces) {
    std::string r = m.push(p);
    if (released) released->push_back(r);
    out += r;
  }
  return out + m.flush();
}

TEST(StopStrings, CutsBeforeTheStopString) {
  StopMatcher m({"END"});
  EXPECT_EQ(feed(m, {"hello ", "world END and more"}), "hello world ");
  EXPECT_TRUE(m.stopped());
}

TEST(StopStrings, StopSpanningPiecesIsHeldBackThenDropped) {
  StopMatcher m({"###"});
  std::vector<std::string> rel;
  EXPECT_EQ(feed(m, {"ab#", "#", "#cd"}, &rel), "ab");
  EXPECT_EQ(rel[0], "ab");  // the '#' is held
  EXPECT_EQ(rel[1], "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopStrings, PartialMatchIsReleasedWhenItFails) {
  StopMatcher m({"###"});
  std::vector<std::string> rel;
  EXPECT_EQ(feed(m, {"a#", "#b", "c"}, &rel), "a##bc");
  EXPECT_EQ(rel[0], "a");
  EXPECT_EQ(rel[1], "##b");
  EXPECT_FALSE(m.stopped());
}

TEST(StopStrings, HeldTailIsReleasedAtTheEnd) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("abc ST"), "abc ");
  EXPECT_EQ(m.flush(), "ST");
}

TEST(StopStrings, EarliestOfSeveralWins) {
  StopMatcher m({"world", "lo w"});
  EXPECT_EQ(feed(m, {"hello world"}), "hel");
}

TEST(StopStrings, MultibyteStopsAndNoStops) {
  StopMatcher m({"。"});
  EXPECT_EQ(feed(m, {"你好", "\xE3\x80", "\x82", "再见"}), "你好");
  StopMatcher none({});
  EXPECT_EQ(feed(none, {"a", "b"}), "ab");
  StopMatcher empty({""});
  EXPECT_EQ(feed(empty, {"a"}), "a");
}

TEST(StopStrings, NothingAfterStop) {
  StopMatcher m({"x"});
  EXPECT_EQ(m.push("axb"), "a");
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
}

}  // namespace
}  // namespace sluice::stop_strings_test
