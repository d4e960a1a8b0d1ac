// Corrupted and truncated checkpoints, bad configs and bad arguments give one
// clear error line and a non-zero exit, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;


// One error line (after the memory plan's line, which a command without --ram
// prints first once the model is planned).
void expect_one_line_error(const test::CommandResult& r, const std::string& must_contain) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  std::string err = r.err;
  if (err.rfind("sluice: memory: ", 0) == 0) err = err.substr(err.find('\n') + 1);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(err.rfind("sluice: error: ", 0), 0u) << r.err;
  EXPECT_NE(err.find(must_contain), std::string::npos) << r.err;
}

test::CommandResult logits(const std::string& dir, const std::string& tokens, const test::TempDir& tmp) {
  return test::run_sluice({"logits", "--model", dir, "--tokens", tokens, "--output", tmp.file("out.st")});
}

TEST(CliErrors, TruncatedCheckpoint) {
  test::TempDir tmp;
  std::string dir = test::copy_golden(tmp, "qwen3_moe_tiny");
  std::string st = dir + "/model.safetensors";
  fs::resize_file(st, fs::file_size(st) - 1000);
  expect_one_line_error(logits(dir, "1,2,3", tmp), "model.safetensors");
  EXPECT_FALSE(fs::exists(tmp.file("out.st")));
}

TEST(CliErrors, CorruptHeaderLength) {
  test::TempDir tmp;
  std::string dir = test::copy_golden(tmp, "qwen3_moe_tiny");
  std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(6);
  f.put('\x7f');
  f.close();
  expect_one_line_error(logits(dir, "1,2,3", tmp), "header length");
}

TEST(CliErrors, CorruptHeaderJson) {
  test::TempDir tmp;
  std::string dir = test::copy_golden(tmp, "gpt_oss_tiny");
  std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(8);
  f.put('!');
  f.close();
  expect_one_line_error(logits(dir, "1,2,3", tmp), "not valid JSON");
}

TEST(CliErrors, MissingTensorIsNamed) {
  test::TempDir tmp;
  std::string dir = test::copy_golden(tmp, "qwen3_moe_tiny");
  // Rename one tensor in the header (same length keeps offsets valid).
  std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string head(n, '\0');
  f.read(head.data(), std::streamsize(n));
  auto pos = head.find("model.norm.weight");
  ASSERT_NE(pos, std::string::npos);
  f.seekp(std::streamoff(8 + pos));
  f.write("model.norX", 10);
  f.close();
  expect_one_line_error(logits(dir, "1,2,3", tmp), "model.norm.weight");
}

TEST(CliErrors, ConfigProblemsNameTheField) {
  test::TempDir tmp;
  std::string dir = test::copy_golden(tmp, "deepseek_v3_tiny");
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  cfg.erase("kv_lora_rank");
  std::ofstream(dir + "/config.json") << cfg.dump();
  expect_one_line_error(logits(dir, "1,2,3", tmp), "'kv_lora_rank'");
  cfg = nlohmann::json::parse(std::ifstream(test::fixture("golden/deepseek_v3_tiny/config.json")));
  cfg["model_type"] = "mystery_moe";
  std::ofstream(dir + "/config.json") << cfg.dump();
  expect_one_line_error(logits(dir, "1,2,3", tmp), "mystery_moe");
  std::ofstream(dir + "/config.json") << "{ not json";
  expect_one_line_error(logits(dir, "1,2,3", tmp), "config.json");
}

TEST(CliErrors, BadTokens) {
  test::TempDir tmp;
  std::string dir = test::fixture("golden/qwen3_moe_tiny");
  expect_one_line_error(logits(dir, "1,99999,3", tmp), "99999");
  expect_one_line_error(logits(dir, "1,x,3", tmp), "'x'");
  expect_one_line_error(logits(dir, "1,-4", tmp), "'-4'");
  expect_one_line_error(test::run_sluice({"logits", "--model", dir, "--tokens", "1,2", "--decode-from", "5",
                                          "--output", tmp.file("o.st")}),
                        "--decode-from");
}

TEST(CliErrors, MissingDirectory) {
  test::TempDir tmp;
  expect_one_line_error(logits(tmp.file("nope"), "1", tmp), "nope");
}

}  // namespace
}  // namespace sluice
