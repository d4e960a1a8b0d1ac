// run and chat use the shipped model by default; speculation never changes the text.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace sluice::cli_run_chat_test {
namespace {

TEST(CliRun, DefaultModelCompletesAndSpeculationGivesTheSameText) {
  auto plain = test::run_sluice({"run", "And God said, Let there be", "--max-new", "24"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.rfind("And God said, Let there be", 0), 0u) << plain.out;
  EXPECT_GT(plain.out.size(), std::string("And God said, Let there be").size() + 10);
  auto spec = test::run_sluice({"run", "And God said, Let there be", "--max-new", "24", "--speculate"});
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  EXPECT_EQ(spec.out, plain.out);
  auto streamed = test::run_sluice({"run", "And God said, Let there be", "--max-new", "24", "--ram", "0.02"});
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  EXPECT_EQ(streamed.out, plain.out);
}

// Seeded sampling: the seed decides the text and speculation does not change
// it (drafts are proposed on this repetitive prompt, and some rejected); greedy
// speculation has drafts accepted here.
TEST(CliRun, SampledTextDependsOnTheSeedNotOnSpeculation) {
  const std::string verse = "And God said, Let there be light: and there was light. ";
  const std::string prompt = verse + verse + "And God said, Let there be";
  auto generate = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"run", prompt, "--max-new", "32", "--stats"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = test::run_sluice(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r;
  };
  auto a = generate({"--temperature", "0.8", "--top-p", "0.95", "--seed", "7"});
  auto b = generate({"--temperature", "0.8", "--top-p", "0.95", "--seed", "7", "--speculate"});
  auto c = generate({"--temperature", "0.8", "--top-p", "0.95", "--seed", "8", "--speculate"});
  EXPECT_EQ(b.out, a.out);
  EXPECT_NE(c.out, a.out);
  EXPECT_NE(b.err.find("[speculation: "), std::string::npos) << b.err;
  EXPECT_EQ(b.err.find(" of 0 drafts"), std::string::npos) << "no draft proposed: " << b.err;
  auto greedy = generate({}), greedy_spec = generate({"--speculate"});
  EXPECT_EQ(greedy_spec.out, greedy.out);
  EXPECT_EQ(greedy_spec.err.find(" 0 of "), std::string::npos) << "no draft accepted: " << greedy_spec.err;
  // The model as its own draft model: every draft is accepted, the text is the same.
  auto self = generate({"--draft-model", test::fixture("../../models/sluice-k3-mini")});
  EXPECT_EQ(self.out, greedy.out);
  EXPECT_NE(self.err.find("drafts accepted (100%)"), std::string::npos) << self.err;
  auto bad = test::run_sluice({"run", "x", "--temperature", "-1"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--temperature"), std::string::npos) << bad.err;
}

// A draft model with another tokenizer drafts through text: the shipped
// model (byte-level BPE) with a golden model that has no tokenizer files (ids
// 0-255 are bytes), greedy and sampled, on text with multi-byte characters;
// the shipped model through text as its own drafter has drafts accepted.
TEST(CliRun, DraftModelWithAnotherTokenizerGivesTheSameText) {
  const std::string prompt = "Grüße aus Köln — 日本語. And God said, Let there be";
  auto generate = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"run", prompt, "--max-new", "24", "--stats", "--no-draft-gate"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = test::run_sluice(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r;
  };
  const std::string bytes_model = test::fixture("golden/qwen3_moe_tiny");
  auto greedy = generate({}), sampled = generate({"--temperature", "0.8", "--seed", "5"});
  auto cross = generate({"--draft-model", bytes_model});
  EXPECT_EQ(cross.out, greedy.out);
  EXPECT_EQ(cross.err.find(" of 0 drafts"), std::string::npos) << "no draft proposed: " << cross.err;
  EXPECT_EQ(generate({"--draft-model", bytes_model, "--temperature", "0.8", "--seed", "5"}).out, sampled.out);
  auto self = generate({"--draft-model", test::fixture("../../models/sluice-k3-mini"), "--draft-retokenize"});
  EXPECT_EQ(self.out, greedy.out);
  EXPECT_EQ(self.err.find(" 0 of "), std::string::npos) << "no draft accepted: " << self.err;
  auto alone = test::run_sluice({"run", "x", "--draft-retokenize"});
  EXPECT_EQ(alone.exit_code, 1);
  EXPECT_NE(alone.err.find("--draft-retokenize"), std::string::npos) << alone.err;
}

TEST(CliChat, AnswersEachLineAndEndsOnEof) {
  test::TempDir tmp;
  // run_sluice feeds no stdin; go through a shell for the piped conversation.
  const std::string cmd = "printf 'Who made the earth?\\nAnd the sea?\\n' | '" + test::sluice_binary() +
                          "' chat --max-new 16 > '" + tmp.file("out") + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(tmp.file("out"));
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_GE(std::count(all.begin(), all.end(), '\n'), 2) << all;
  EXPECT_EQ(all.find("error"), std::string::npos) << all;
}

// Without --ram the first line says what the plan made of the memory available
// (the shipped model fits: mapped) and how to change it; --ram 0 or map: no
// budget and no such line; the words and numbers --ram takes.
TEST(CliRun, WithoutRamTheFirstLineSaysHowTheModelIsPlanned) {
  const std::vector<std::string> run = {"run", "And God said", "--max-new", "8"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = run;
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_sluice(args);
  };
  const auto plain = with({});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const std::string first = plain.err.substr(0, plain.err.find('\n'));
  EXPECT_EQ(first.rfind("sluice: memory: the model (", 0), 0u) << plain.err;
  EXPECT_NE(first.find(" available: MemAvailable "), std::string::npos) << first;
  EXPECT_NE(first.find(": weights mapped, nothing streamed; --ram GIB streams within a budget instead"),
            std::string::npos)
      << first;
  const auto automatic = with({"--ram", "auto"});  // the default by name (MemAvailable moves between runs)
  EXPECT_EQ(automatic.err.rfind("sluice: memory: the model (", 0), 0u) << automatic.err;
  EXPECT_EQ(automatic.out, plain.out);
  for (const char* none : {"0", "map"}) {
    const auto mapped = with({"--ram", none});
    ASSERT_EQ(mapped.exit_code, 0) << mapped.err;
    EXPECT_EQ(mapped.err, "") << none;
    EXPECT_EQ(mapped.out, plain.out) << none;
  }
  for (const char* bad : {"lots", "-1", "1e30", "nan", ""}) {
    const auto r = with({"--ram", bad});
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_NE(r.err.find("--ram"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("expected auto, map, 0 or a number of GiB"), std::string::npos) << r.err;
  }
}

TEST(CliRun, MissingDefaultModelIsAClearError) {
  auto r = test::run_sluice({"run", "x", "--model", "/nonexistent/model"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/model"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sluice::cli_run_chat_test
