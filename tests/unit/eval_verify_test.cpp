// sluice eval (perplexity, KL divergence and top-1 agreement against a
// reference) and sluice verify (a prepared checkpoint against its manifest).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "model/model.h"
#include "runtime/evaluation.h"
#include "format/manifest.h"
#include "store/verify.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::eval_verify_test {
namespace {

std::vector<int32_t> ids_of(const std::vector<int64_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); }

// The perplexity of the float64 reference logits of a golden sequence, computed here.
double reference_perplexity(const std::string& ref, const std::vector<int32_t>& ids, int64_t V) {
  const auto logits = test::read_f64(ref, "logits");
  double nll = 0;
  for (size_t t = 0; t + 1 < ids.size(); ++t) {
    const double* row = logits.data() + t * size_t(V);
    double mx = row[0];
    for (int64_t i = 1; i < V; ++i) mx = std::max(mx, row[i]);
    double sum = 0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(row[i] - mx);
    nll -= row[ids[t + 1]] - mx - std::log(sum);
  }
  return std::exp(nll / double(ids.size() - 1));
}

TEST(Eval, PerplexityMatchesTheFloat64Reference) {
  for (const std::string name : {"qwen3_moe_tiny", "kimi_k3_tiny"}) {
    const std::string dir = test::fixture("golden/" + name), ref = dir + "/reference.safetensors";
    const auto ids = ids_of(test::read_i64(ref, "input_ids"));
    auto m = load_model(dir);
    for (int64_t chunk : {1, 7, 64}) {
      const EvalReport r = evaluate(*m, nullptr, {ids}, chunk);
      EXPECT_EQ(r.predictions, int64_t(ids.size()) - 1);
      EXPECT_NEAR(r.perplexity(), reference_perplexity(ref, ids, m->info().vocab), 1e-4 * r.perplexity())
          << name << " chunk " << chunk;
      EXPECT_FALSE(r.compared);
    }
  }
}

TEST(Eval, AgainstItselfKlIsZeroAndTop1Agrees) {
  const std::string dir = test::fixture("golden/deepseek_v3_tiny_fp8");
  const auto ids = ids_of(test::read_i64(dir + "/reference.safetensors", "input_ids"));
  auto a = load_model(dir), b = load_model(dir);
  const EvalReport r = evaluate(*a, b.get(), {ids, std::vector<int32_t>(ids.begin(), ids.begin() + 9)});
  EXPECT_EQ(r.documents, 2);
  EXPECT_EQ(r.predictions, int64_t(ids.size()) - 1 + 8);
  EXPECT_EQ(r.kl_sum, 0.0);
  EXPECT_EQ(r.top1_agreement(), 1.0);
  EXPECT_EQ(r.ref_perplexity(), r.perplexity());
}

// An int8 spine (sluice prepare --spine int8) against the same weights as released.
TEST(Eval, Int8SpineCostsSomeKlButLittle) {
  test::TempDir tmp;
  const std::string dir = test::copy_golden(tmp, "qwen3_moe_tiny");
  auto p = test::run_sluice({"prepare", "--model", dir, "--spine", "int8"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto ids = ids_of(test::read_i64(dir + "/reference.safetensors", "input_ids"));
  std::string list;
  for (size_t i = 0; i < ids.size(); ++i) list += (i ? "," : "") + std::to_string(ids[i]);
  auto r = test::run_sluice({"eval", "--model", dir, "--tokens", list, "--reference-as-released", "--json",
                             tmp.file("eval.json"), "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("mean KL(reference || model)"), std::string::npos) << r.out;
  nlohmann::json j;
  std::ifstream(tmp.file("eval.json")) >> j;
  EXPECT_EQ(j["predictions"], int64_t(ids.size()) - 1);
  EXPECT_GT(j["mean_kl"].get<double>(), 0.0);  // int8 rounding changes the function...
  EXPECT_LT(j["mean_kl"].get<double>(), 0.05);  // ...a little
  EXPECT_GT(j["top1_agreement"].get<double>(), 0.8);
  EXPECT_NEAR(j["reference_perplexity"].get<double>(),
              reference_perplexity(dir + "/reference.safetensors", ids, 1024), 1e-4 * j["reference_perplexity"].get<double>());
}

TEST(Eval, CliErrors) {
  auto r = test::run_sluice({"eval", "--model", test::fixture("golden/qwen3_moe_tiny")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("give one of --text, --jsonl or --tokens"), std::string::npos) << r.err;
  r = test::run_sluice({"eval", "--model", test::fixture("golden/qwen3_moe_tiny"), "--tokens", "1,2,5000"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("token 5000 is outside the vocabulary"), std::string::npos) << r.err;
}

TEST(Verify, PreparedCheckpointPassesAndDamageIsNamed) {
  test::TempDir tmp;
  const std::string dir = test::copy_golden(tmp, "qwen3_moe_tiny");
  EXPECT_THROW(verify_checkpoint(dir, false), Error);  // not prepared yet
  ASSERT_EQ(test::run_sluice({"prepare", "--model", dir}).exit_code, 0);
  VerifyReport r = verify_checkpoint(dir, false);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.experts, 3 * 16);
  EXPECT_GT(r.bytes, 0u);
  auto cli = test::run_sluice({"verify", "--model", dir, "--quiet"});
  EXPECT_EQ(cli.exit_code, 0) << cli.out << cli.err;
  // One flipped bit inside expert 5 of layer 1.
  const Manifest man = *find_manifest(dir);
  const ManifestExpert* e = nullptr;
  for (const auto& x : man.experts)
    if (x.layer == 1 && x.expert == 5) e = &x;
  ASSERT_NE(e, nullptr);
  const std::string shard = dir + "/" + man.files[size_t(e->extents[0].file)].first;
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(e->extents[0].offset + 100));
    char c;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(std::streamoff(e->extents[0].offset + 100));
    f.write(&c, 1);
  }
  r = verify_checkpoint(dir, false);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("expert 5 of layer 1"), std::string::npos) << r.problems[0];
  EXPECT_NE(r.problems[0].find("XXH3"), std::string::npos) << r.problems[0];
  cli = test::run_sluice({"verify", "--model", dir, "--quiet"});
  EXPECT_EQ(cli.exit_code, 1);
  EXPECT_NE(cli.out.find("MISMATCH expert 5 of layer 1"), std::string::npos) << cli.out;
  // A truncated shard: its size, and every expert in it.
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 1);
  r = verify_checkpoint(dir, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.problems[0].find("bytes, the manifest says"), std::string::npos) << r.problems[0];
}

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(offset));
  char c;
  f.read(&c, 1);
  c ^= 0x01;
  f.seekp(std::streamoff(offset));
  f.write(&c, 1);
}

// Every byte outside the experts is covered too: the shards' headers and spine
// tensors (the weights as released) and the prepared spine file.
TEST(Verify, SpineBytesAndSpineFileAreChecksummed) {
  test::TempDir tmp;
  const std::string dir = test::copy_golden(tmp, "qwen3_moe_tiny");
  ASSERT_EQ(test::run_sluice({"prepare", "--model", dir}).exit_code, 0);
  const Manifest man = *find_manifest(dir);
  ASSERT_EQ(man.rest_checksums.size(), man.files.size());
  ASSERT_TRUE(man.spine_file.has_value());
  VerifyReport r = verify_checkpoint(dir, false);
  ASSERT_TRUE(r.ok()) << r.problems[0];
  EXPECT_TRUE(r.unchecked.empty());
  // Every byte is hashed exactly once: experts + the rest of the shards + the spine file.
  uint64_t shard_bytes = 0;
  for (const auto& f : man.files) shard_bytes += f.second;
  EXPECT_EQ(r.bytes + r.spine_bytes, shard_bytes + man.spine_file->size);

  // A byte of the last shard's spine region (its last byte: the experts of this
  // fixture are not at the very end) or of its header, then of the spine file.
  const std::string shard = dir + "/" + man.files.back().first;
  uint64_t in_experts_end = 0;
  for (const auto& e : man.experts)
    for (const auto& x : e.extents)
      if (size_t(x.file) + 1 == man.files.size()) in_experts_end = std::max(in_experts_end, x.offset + x.length);
  ASSERT_LT(in_experts_end, man.files.back().second) << "fixture changed: experts end the shard";
  flip_byte(shard, man.files.back().second - 1);
  r = verify_checkpoint(dir, false);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find(man.files.back().first), std::string::npos) << r.problems[0];
  EXPECT_NE(r.problems[0].find("outside the experts"), std::string::npos) << r.problems[0];
  flip_byte(shard, man.files.back().second - 1);  // repaired
  flip_byte(shard, 12);                            // the safetensors header
  r = verify_checkpoint(dir, false);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("outside the experts"), std::string::npos) << r.problems[0];
  flip_byte(shard, 12);
  ASSERT_TRUE(verify_checkpoint(dir, false).ok());
  flip_byte(dir + "/" + kSpineFile, man.spine_file->size / 2);
  r = verify_checkpoint(dir, false);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("the spine file's XXH3"), std::string::npos) << r.problems[0];
  auto cli = test::run_sluice({"verify", "--model", dir, "--quiet"});
  EXPECT_EQ(cli.exit_code, 1);
  EXPECT_NE(cli.out.find("MISMATCH"), std::string::npos) << cli.out;
}

// A manifest written before the spine checksums existed still verifies its
// experts, and says what it could not check.
TEST(Verify, OlderManifestSaysTheSpineIsNotChecked) {
  test::TempDir tmp;
  const std::string dir = test::copy_golden(tmp, "qwen3_moe_tiny");
  ASSERT_EQ(test::run_sluice({"prepare", "--model", dir}).exit_code, 0);
  const std::string path = dir + "/" + kManifestFile;
  nlohmann::json j;
  std::ifstream(path) >> j;
  j["spine"].erase("xxh3");
  j["spine"].erase("size");
  for (auto& f : j["files"]) f.erase("rest_xxh3");
  std::ofstream(path) << j.dump();
  const VerifyReport r = verify_checkpoint(dir, false);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.spine_bytes, 0u);
  ASSERT_EQ(r.unchecked.size(), 1u);
  EXPECT_NE(r.unchecked[0].find("older sluice prepare"), std::string::npos) << r.unchecked[0];
  auto cli = test::run_sluice({"verify", "--model", dir, "--quiet"});
  EXPECT_EQ(cli.exit_code, 0);
  EXPECT_NE(cli.out.find("NOT CHECKED the spine"), std::string::npos) << cli.out;
  // Checksums on some files only is a malformed manifest, named.
  std::ifstream(path) >> j;
  j["files"][0]["rest_xxh3"] = "0123456789abcdef";
  j["files"].push_back({{"name", "other.safetensors"}, {"size", 10}});  // without one
  std::ofstream(path) << j.dump();
  try {
    (void)Manifest::load(path);
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rest_xxh3 on some files only"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sluice::eval_verify_test
