// sluice prepare: the spine file reproduces the model (bf16 exactly as
// released; int8 within its quantisation error), the manifest lists every
// expert with a checksum that catches corruption, and an interrupted run
// resumes from its partial manifest.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/engine.h"
#include "runtime/session.h"
#include "format/manifest.h"
#include "store/prepare.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::prepare_test {
namespace {

namespace fs = std::filesystem;


std::vector<double> logits_of(const std::string& dir, const LoadOptions& o = {}) {
  auto ids = test::read_i64(dir + "/reference.safetensors", "input_ids");
  auto m = load_model(dir, o);
  Session s(*m);
  auto l = s.feed_all(std::vector<int32_t>(ids.begin(), ids.end()));
  return std::vector<double>(l.begin(), l.end());
}

TEST(Prepare, Bf16SpineReproducesTheModelAndManifestCoversEveryExpert) {
  for (const char* name : {"deepseek_v3_tiny_fp8", "gpt_oss_tiny", "kimi_k3_tiny"}) {
    test::TempDir tmp;
    std::string dir = test::copy_golden(tmp, name);
    auto before = logits_of(dir);
    PrepareResult r = prepare({dir, "bf16", false});
    EXPECT_TRUE(fs::exists(dir + "/sluice-spine.safetensors"));
    Manifest m = Manifest::load(dir + "/sluice-manifest.json");
    EXPECT_EQ(int64_t(m.experts.size()), r.experts);
    EXPECT_GT(r.experts, 0);
    // Same bytes, so the same numbers, resident and streamed (checksums verified).
    EXPECT_EQ(logits_of(dir), before) << name;
    LoadOptions so;
    so.stream_experts = true;
    so.streaming.cache_bytes = 1u << 20;
    EXPECT_EQ(logits_of(dir, so), before) << name;
    auto ref = test::read_f64(dir + "/reference.safetensors", "logits");
    EXPECT_LE(test::max_row_rel_error(logits_of(dir), ref, 1024), 1e-3);
  }
}

TEST(Prepare, Int8SpineIsRowWiseAndClose) {
  test::TempDir tmp;
  std::string dir = test::copy_golden(tmp, "kimi_k3_tiny");
  prepare({dir, "int8", false});
  SafetensorsFile spine(dir + "/sluice-spine.safetensors");
  TensorView q = spine.get("language_model.model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q.dtype(), DType::I8);
  EXPECT_TRUE(spine.has("language_model.model.layers.0.self_attn.q_proj.weight_row_scale"));
  EXPECT_EQ(spine.get("language_model.model.layers.1.block_sparse_moe.gate.weight").dtype(), DType::BF16);  // router kept
  auto hidden_ref = test::read_f64(dir + "/reference.safetensors", "hidden.0");
  auto ids = test::read_i64(dir + "/reference.safetensors", "input_ids");
  auto m = load_model(dir);
  Session s(*m);
  ForwardTrace tr;
  s.feed_all(std::vector<int32_t>(ids.begin(), ids.end()), &tr);
  std::vector<double> h0(tr.hidden[0].begin(), tr.hidden[0].end());
  const double err = test::max_row_rel_error(h0, hidden_ref, 256);
  // It is a different model (int8 rounds each weight to ~0.4% of its row's
  // largest value), but after one layer of about eight chained projections the
  // hidden state stays within ~10%; a wrong scale or layout gives errors near 1.
  EXPECT_GT(err, 1e-5);
  EXPECT_LT(err, 0.1);
}

TEST(Prepare, CorruptExpertIsCaughtByTheManifestChecksum) {
  test::TempDir tmp;
  std::string dir = test::copy_golden(tmp, "qwen3_moe_tiny");
  prepare({dir, "bf16", false});
  Manifest m = Manifest::load(dir + "/sluice-manifest.json");
  const auto& x = m.experts[5].extents[0];
  {
    std::fstream f(dir + "/" + m.files[size_t(x.file)].first, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(x.offset + 100));
    char c;
    f.get(c);
    f.seekp(std::streamoff(x.offset + 100));
    f.put(char(c ^ 0x40));
  }
  LoadOptions so;
  so.stream_experts = true;
  so.streaming.cache_bytes = 1u << 20;
  try {
    auto model = load_model(dir, so);
    Session s(*model);
    for (int32_t t = 3; t < 300; ++t) s.feed({t});
    FAIL() << "corrupted expert was not detected";
  } catch (const Error& e) {
    const std::string want = fmt::format("expert {} of layer {}", m.experts[5].expert, m.experts[5].layer);
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

TEST(Prepare, ResumesFromPartialManifest) {
  test::TempDir tmp;
  std::string dir = test::copy_golden(tmp, "deepseek_v3_tiny");
  prepare({dir, "bf16", false});
  Manifest full = Manifest::load(dir + "/sluice-manifest.json");
  // Simulate an interruption after half the checksums.
  Manifest partial = full;
  partial.experts.resize(full.experts.size() / 2);
  partial.save(dir + "/sluice-manifest.json.partial");
  fs::remove(dir + "/sluice-manifest.json");
  PrepareResult r = prepare({dir, "bf16", false});
  EXPECT_TRUE(r.spine_reused);
  EXPECT_EQ(r.experts_resumed, int64_t(full.experts.size() / 2));
  Manifest again = Manifest::load(dir + "/sluice-manifest.json");
  ASSERT_EQ(again.experts.size(), full.experts.size());
  for (size_t i = 0; i < full.experts.size(); ++i) EXPECT_EQ(again.experts[i].checksum, full.experts[i].checksum);
  EXPECT_FALSE(fs::exists(dir + "/sluice-manifest.json.partial"));
}

}  // namespace
}  // namespace sluice::prepare_test

namespace sluice::prepare_test {
namespace {

TEST(Prepare, ExpertPacksMakeEachExpertOneAlignedExtent) {
  test::TempDir tmp;
  std::string dir = test::copy_golden(tmp, "deepseek_v3_tiny_fp8");  // FP8 experts: weights and scales apart
  auto before = logits_of(dir);
  {
    Manifest plain;
    prepare({dir, "bf16", false, false});
    plain = Manifest::load(dir + "/sluice-manifest.json");
    EXPECT_EQ(plain.experts[0].extents.size(), 2u);  // weights run + scales run
  }
  PrepareOptions po{dir, "bf16", false, true};
  PrepareResult r = prepare(po);
  EXPECT_EQ(r.packs, 3);
  Manifest m = Manifest::load(dir + "/sluice-manifest.json");
  for (const auto& e : m.experts) {
    ASSERT_EQ(e.extents.size(), 1u);
    EXPECT_EQ(e.extents[0].offset % 4096, 0u);
    EXPECT_NE(m.files[size_t(e.extents[0].file)].first.find("sluice-experts-"), std::string::npos);
  }
  LoadOptions so;
  so.stream_experts = true;
  so.streaming.cache_bytes = 1u << 20;
  EXPECT_EQ(logits_of(dir, so), before);
  EXPECT_EQ(logits_of(dir), before);

  test::TempDir tmp2;
  std::string oss = test::copy_golden(tmp2, "gpt_oss_tiny");
  try {
    prepare({oss, "bf16", false, true});
    FAIL() << "stacked experts were packed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stacked"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sluice::prepare_test

namespace sluice::prepare_test {
namespace {

// A manifest's numbers are integers that fit their fields: a size written as 1e80 or a layer of
// 2^40 is a malformed manifest (named), never a cast out of range.
using test::error_of;
using test::TempDir;

TEST(ManifestLoad, NumbersMustBeIntegersThatFitTheirFields) {
  TempDir tmp;
  const std::string path = tmp.file("sluice-manifest.json");
  const auto error_for = [&](const std::string& size, const std::string& layer) {
    std::ofstream(path) << R"({"version":1,"spine":{"format":"bf16"},"files":[{"name":"a","size":)" << size
                        << R"(}],"experts":[[)" << layer << R"(,0,[[0,0,16]],"00ff"]]})";
    return error_of([&] { Manifest::load(path); });
  };
  EXPECT_EQ(error_for("4096", "0"), "");
  for (const auto& [size, layer] : std::vector<std::pair<std::string, std::string>>{
           {"1e80", "0"}, {"4096.5", "0"}, {"-1", "0"}, {"4096", "1099511627776"}, {"4096", "-3000000000"}}) {
    const std::string e = error_for(size, layer);
    EXPECT_NE(e.find("malformed manifest"), std::string::npos) << size << " " << layer << ": " << e;
    EXPECT_NE(e.find("fits"), std::string::npos) << size << " " << layer << ": " << e;
  }
}

// Found by a random fuzz run of stream_tables_fuzz: a layer of -1 passed the load and indexed
// checksum_table() before its first row. Coordinates and extents are checked when read.
TEST(ManifestLoad, ExpertCoordinatesAndExtentsMustBeInRange) {
  TempDir tmp;
  const std::string path = tmp.file("sluice-manifest.json");
  const auto error_for = [&](const std::string& expert) {
    std::ofstream(path) << R"({"version":1,"spine":{"format":"bf16"},"files":[{"name":"a","size":4096}],"experts":[)"
                        << expert << "]}";
    return error_of([&] { Manifest::load(path); });
  };
  EXPECT_EQ(error_for(R"([3,7,[[0,4080,16]],"00ff"])"), "");
  for (const auto& [expert, says] : std::vector<std::pair<std::string, std::string>>{
           {R"([-1,0,[[0,0,16]],"00ff"])", "(layer -1, expert 0) is out of range"},
           {R"([0,-5,[[0,0,16]],"00ff"])", "(layer 0, expert -5) is out of range"},
           {R"([0,2000000000,[[0,0,16]],"00ff"])", "out of range"},
           {R"([0,0,[[1,0,16]],"00ff"])", "extent in file 1, but there are 1 files"},
           {R"([0,0,[[-1,0,16]],"00ff"])", "extent in file -1"},
           {R"([0,0,[[0,4081,16]],"00ff"])", "runs past the end of a (4096 bytes)"},
           {R"([0,0,[[0,18446744073709551615,16]],"00ff"])", "runs past the end"}}) {
    const std::string e = error_for(expert);
    EXPECT_NE(e.find(says), std::string::npos) << expert << ": " << e;
    EXPECT_NE(e.find("sluice-manifest.json: experts[0]"), std::string::npos) << expert << ": " << e;
  }
}

}  // namespace
}  // namespace sluice::prepare_test
