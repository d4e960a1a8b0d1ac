// Corrupted and truncated checkpoints, bad configs and bad arguments give one
// clear error line and a non-zero exit, never a crash.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace sluice::cli_errors_test {
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

// What a first-time user meets with a wrong --model: every command that reads a
// model says what is wrong with the directory, names it, and says what to do.
TEST(CliErrors, WrongModelDirectoriesSayWhatToDo) {
  test::TempDir tmp;
  const std::string shipped = test::fixture("../../models/sluice-k3-mini");
  auto copy_model = [&](const std::string& name) {
    const std::string d = tmp.file(name);
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(shipped)) fs::copy_file(e.path(), d + "/" + e.path().filename().string());
    return d;
  };
  const std::string empty = tmp.file("empty"), config_only = tmp.file("config_only"), a_file = tmp.file("a_file");
  fs::create_directories(empty);
  fs::create_directories(config_only);
  fs::copy_file(shipped + "/config.json", config_only + "/config.json");
  std::ofstream(a_file) << "not a model";
  const std::string missing_shard = copy_model("missing_shard");
  fs::remove(missing_shard + "/model-00002-of-000002.safetensors");
  const std::string truncated = copy_model("truncated");
  fs::resize_file(truncated + "/model-00002-of-000002.safetensors", 5000000);
  // An interrupted `sluice pull`: its staging directory is still there, a shard not yet in place.
  const std::string interrupted = copy_model("interrupted");
  fs::create_directories(interrupted + "/.sluice-pull");
  fs::rename(interrupted + "/model-00002-of-000002.safetensors",
             interrupted + "/.sluice-pull/model-00002-of-000002.safetensors");

  struct Case {
    std::string dir;
    std::vector<std::string> said;
  };
  const std::vector<Case> cases = {
      {tmp.file("nowhere"), {"nowhere: no such directory", "sluice pull ORG/NAME --dir DIR"}},
      {a_file, {"a_file: is a file, not a model directory", "config.json"}},
      {empty, {"empty: not a model directory: it has no config.json", "model.safetensors.index.json"}},
      {config_only, {"config_only: no weights", "is incomplete: fetch it again"}},
      {missing_shard, {"missing_shard: shard model-00002-of-000002.safetensors", "is missing", "is incomplete"}},
      {truncated, {"truncated/model-00002-of-000002.safetensors", "the file is truncated", "is incomplete"}},
      {interrupted, {"interrupted: shard model-00002-of-000002.safetensors", "an interrupted `sluice pull`",
                     "run the same `sluice pull ... --dir " + interrupted + "` again"}},
  };
  for (const auto& c : cases) {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"run", "x", "--model", c.dir}, {"chat", "--model", c.dir},
          {"serve", "--model", c.dir, "--port", "0"}, {"generate", "--tokens", "1,2", "--model", c.dir},
          {"prepare", "--model", c.dir, "--quiet"}, {"info", "--model", c.dir}}) {
      const auto r = test::run_sluice(args);
      SCOPED_TRACE(args[0] + " " + c.dir);
      for (const auto& s : c.said) expect_one_line_error(r, s);
    }
  }
}

TEST(CliErrors, PullSaysWhatToDo) {
  test::TempDir tmp;
  const std::string a_file = tmp.file("a_file");
  std::ofstream(a_file) << "x";
  expect_one_line_error(test::run_sluice({"pull", "org/name", "--dir", a_file, "--quiet"}),
                        "--dir " + a_file + ": is a file");
  // Nothing listens on port 1: the network advice (one attempt, not the default eight with backoff).
  setenv("SLUICE_HTTP_ATTEMPTS", "1", 1);
  const auto r = test::run_sluice({"pull", "org/name", "--dir", tmp.file("m"), "--base", "http://127.0.0.1:1", "--quiet"});
  unsetenv("SLUICE_HTTP_ATTEMPTS");
  expect_one_line_error(r, "config.json from http://127.0.0.1:1/org/name/resolve/main/config.json failed");
  expect_one_line_error(r, "check the network connection, or point --base (or $SLUICE_HF_BASE) at a reachable mirror");
}


// Issue 38, finding 7: a number too large for the integer it becomes (1e30 GB)
// converted with undefined behaviour. Each such flag is checked on the way and
// refused with one line naming it, before anything is loaded or fetched.
TEST(CliErrors, NumbersTooLargeForTheirIntegerNameTheFlag) {
  test::TempDir tmp;
  const std::string model = test::copy_golden(tmp, "qwen3_moe_tiny");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      // (--threads -1: without the check, the next error, not a server left running)
      {{"serve", "--model", model, "--prompt-cache", tmp.file("pc"), "--prompt-cache-max", "1e30", "--threads", "-1"},
       "--prompt-cache-max"},
      {{"pull", "org/name", "--dir", tmp.file("m"), "--stream", "--cache-max", "1e30", "--quiet", "--base",
        "http://127.0.0.1:1"},
       "--cache-max"},
      {{"pull", "org/name", "--dir", tmp.file("m"), "--chunk-mb", "1e30", "--quiet", "--base", "http://127.0.0.1:1"},
       "--chunk-mb"},
      {{"cache", "prune", "--model", model, "--max", "1e30"}, "--max"},
      {{"logits", "--model", model, "--tokens", "1", "--output", tmp.file("o.st"), "--vram", "1e30", "--threads", "-1"},
       "--vram"},
  };
  setenv("SLUICE_HTTP_ATTEMPTS", "1", 1);
  for (const auto& [args, flag] : cases) {
    const auto r = test::run_sluice(args);
    SCOPED_TRACE(args[0] + " " + flag);
    expect_one_line_error(r, flag);
    EXPECT_NE(r.err.find("out of range"), std::string::npos) << r.err;
  }
  unsetenv("SLUICE_HTTP_ATTEMPTS");
  // --ram is read by the option parser itself: its usage error, with the same check.
  const auto r = test::run_sluice({"info", "--ram", "1e30"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--ram: 1e+30 is out of range"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sluice::cli_errors_test
