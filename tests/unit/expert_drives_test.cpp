// Expert packs spread over several directories (drives): placement balances
// each layer's bytes per drive and puts an expert's projections on different
// drives; a model packed over three directories decodes bit for bit as one
// packed in one; each directory has its own read queue and counters; missing
// directories, missing and corrupt pack files are errors naming the path;
// verify covers every drive; --relocate points the manifest at moved drives.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "experts/drive_placement.h"
#include "format/manifest.h"
#include "runtime/session.h"
#include "store/expert_dirs.h"
#include "store/prepare.h"
#include "store/verify.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::expert_drives_test {
namespace {

namespace fs = std::filesystem;

std::vector<float> logits_of(const std::string& dir, const LoadOptions& o = {}) {
  auto ids = test::read_i64(dir + "/reference.safetensors", "input_ids");
  auto m = load_model(dir, o);
  Session s(*m);
  return s.feed_all(std::vector<int32_t>(ids.begin(), ids.end()));
}

LoadOptions streamed() {
  LoadOptions o;
  o.stream_experts = true;
  o.streaming.cache_bytes = 1u << 20;
  return o;
}

using test::error_of;

TEST(ExpertPlacement, BalancesEachLayerAndSpreadsEachExpert) {
  // Two layers of 10 experts with gate/up of 300 bytes and down of 500, then one of 7 experts.
  std::vector<PlacementUnit> units;
  for (int32_t l = 0; l < 3; ++l)
    for (int32_t e = 0; e < (l < 2 ? 10 : 7); ++e)
      for (uint64_t b : {300, 300, 500}) units.push_back({l, e, b});
  for (int32_t drives : {1, 2, 3, 4}) {
    const std::vector<int32_t> d = place_units(units, drives);
    ASSERT_EQ(d.size(), units.size());
    EXPECT_EQ(place_units(units, drives), d) << "placement is deterministic";
    std::map<std::pair<int32_t, int32_t>, uint64_t> load;  // (layer, drive) -> bytes
    std::map<std::pair<int32_t, int32_t>, std::set<int32_t>> of_expert;
    for (size_t u = 0; u < units.size(); ++u) {
      ASSERT_GE(d[u], 0);
      ASSERT_LT(d[u], drives);
      load[{units[u].layer, d[u]}] += units[u].bytes;
      of_expert[{units[u].layer, units[u].expert}].insert(d[u]);
    }
    for (int32_t l = 0; l < 3; ++l) {
      uint64_t lo = UINT64_MAX, hi = 0;
      for (int32_t x = 0; x < drives; ++x) {
        lo = std::min(lo, load[{l, x}]);
        hi = std::max(hi, load[{l, x}]);
      }
      EXPECT_LE(hi - lo, 500u) << drives << " drives, layer " << l << ": at most one unit apart";
    }
    for (const auto& [key, set] : of_expert)
      EXPECT_EQ(set.size(), size_t(std::min(drives, 3))) << "expert " << key.second << ": projections on distinct drives";
  }
  EXPECT_THROW(place_units(units, 0), Error);
}

// The golden model packed in one directory and, in a second copy, over three.
struct TwoPackings {
  test::TempDir tmp;
  std::string one, three;
  std::vector<std::string> drives;
  explicit TwoPackings(const std::string& name) {
    one = test::copy_golden(tmp, name);
    fs::create_directories(tmp.file("b"));
    three = tmp.file("b/") + name;
    fs::copy(one, three, fs::copy_options::recursive);
    for (int d = 0; d < 3; ++d) {
      drives.push_back(tmp.file("drive" + std::to_string(d)));
      fs::create_directories(drives.back());
    }
    PrepareOptions o{one, "bf16", false, true};
    prepare(o);
    o.dir = three;
    o.expert_dirs = drives;
    prepare(o);
  }
};

TEST(ExpertDrives, PackedOverThreeDirectoriesDecodesBitIdentically) {
  for (const char* name : {"kimi_k3_tiny", "deepseek_v3_tiny_fp8"}) {
    TwoPackings p(name);
    const Manifest m = Manifest::load(p.three + "/" + kManifestFile);
    ASSERT_EQ(m.expert_dirs.size(), 3u);
    EXPECT_EQ(m.pack_dirs.size(), m.packs.size());
    // Every expert is in the packs, its projections on more than one drive.
    std::set<std::pair<int32_t, int32_t>> seen;
    for (const auto& e : m.experts) {
      EXPECT_TRUE(seen.insert({e.layer, e.expert}).second);
      std::set<std::string> dirs;
      for (const auto& x : e.extents) {
        const std::string path = m.file_path(p.three, size_t(x.file));
        EXPECT_NE(path.find("/drive"), std::string::npos) << path;
        dirs.insert(fs::path(path).parent_path().string());
      }
      EXPECT_GE(dirs.size(), 2u) << "expert " << e.expert << " of layer " << e.layer;
    }
    EXPECT_EQ(seen.size(), Manifest::load(p.one + "/" + kManifestFile).experts.size());
    const std::vector<float> ref = logits_of(p.one);
    EXPECT_EQ(logits_of(p.three), ref) << name << ": mapped";
    EXPECT_EQ(logits_of(p.three, streamed()), ref) << name << ": streamed";
    // Each directory is a drive with its own queue: the three expert directories served the reads.
    auto engine = load_model(p.three, streamed());
    Session s(*engine);
    s.feed_all({1, 2, 3});
    ASSERT_NE(engine->streaming_experts(), nullptr);
    const std::vector<DriveStats> ds = engine->streaming_experts()->drive_stats();
    uint64_t on_drives = 0;
    int served = 0;
    for (const auto& d : ds) {
      if (d.dir.find("/drive") == std::string::npos) continue;
      on_drives += d.bytes_read;
      served += d.bytes_read > 0 && d.reads > 0;
    }
    EXPECT_EQ(served, 3) << name;
    EXPECT_EQ(on_drives, engine->expert_stats().bytes_read) << name;
    ASSERT_TRUE(verify_checkpoint(p.three, false).ok()) << verify_checkpoint(p.three, false).problems[0];
  }
}

TEST(ExpertDrives, VerifyCoversEveryDrive) {
  TwoPackings p("kimi_k3_tiny");
  const Manifest m = Manifest::load(p.three + "/" + kManifestFile);
  VerifyReport r = verify_checkpoint(p.three, false);
  ASSERT_TRUE(r.ok()) << r.problems[0];
  EXPECT_EQ(r.files, int64_t(m.files.size()));
  uint64_t expert_bytes = 0;
  for (const auto& e : m.experts)
    for (const auto& x : e.extents) expert_bytes += x.length;
  EXPECT_EQ(r.bytes, expert_bytes);
  // One byte of an expert on the third drive.
  const ManifestExpert* victim = nullptr;
  ExpertExtent at;
  for (const auto& e : m.experts)
    for (const auto& x : e.extents)
      if (!victim && m.file_path(p.three, size_t(x.file)).find("/drive2/") != std::string::npos) {
        victim = &e;
        at = x;
      }
  ASSERT_NE(victim, nullptr);
  const std::string pack = m.file_path(p.three, size_t(at.file));
  {
    std::fstream f(pack, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(at.offset + at.length / 2));
    char c;
    f.read(&c, 1);
    c = char(c ^ 0x40);
    f.seekp(std::streamoff(at.offset + at.length / 2));
    f.write(&c, 1);
  }
  r = verify_checkpoint(p.three, false);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find(pack), std::string::npos) << r.problems[0];
  EXPECT_NE(r.problems[0].find(fmt::format("expert {} of layer {}", victim->expert, victim->layer)), std::string::npos)
      << r.problems[0];
  // Streamed, the corrupt expert is refused naming its file.
  auto engine = load_model(p.three, streamed());
  ExpertSource& src = engine->expert_source();
  const std::string err = error_of([&] {
    src.request(victim->layer, &victim->expert, 1);
    src.acquire(victim->layer, victim->expert);
  });
  EXPECT_NE(err.find("checksum mismatch"), std::string::npos) << err;
  EXPECT_NE(err.find("/drive"), std::string::npos) << err;
}

TEST(ExpertDrives, MissingDirectoryOrPackIsNamedAndRelocateFindsMovedDrives) {
  TwoPackings p("kimi_k3_tiny");
  const std::vector<float> ref = logits_of(p.one);
  const Manifest m = Manifest::load(p.three + "/" + kManifestFile);
  // A drive not mounted (its directory gone).
  const std::string moved = p.tmp.file("elsewhere");
  fs::rename(p.drives[1], moved);
  std::string err = error_of([&] { load_model(p.three); });
  EXPECT_NE(err.find(m.expert_dirs[1]), std::string::npos) << err;
  EXPECT_NE(err.find("does not exist"), std::string::npos) << err;
  VerifyReport r = verify_checkpoint(p.three, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.problems[0].find(m.expert_dirs[1]), std::string::npos) << r.problems[0];
  // Relocating needs every pack where it is said to be; then the model loads from there.
  err = error_of([&] { relocate_expert_dirs(p.three, {p.drives[0], p.drives[2], moved}); });
  EXPECT_NE(err.find(p.drives[2] + "/sluice-experts-"), std::string::npos) << "drive 3 holds drive 2's packs: " << err;
  err = error_of([&] { relocate_expert_dirs(p.three, {p.drives[0], moved}); });
  EXPECT_NE(err.find("3"), std::string::npos) << err;
  EXPECT_EQ(relocate_expert_dirs(p.three, {p.drives[0], moved, p.drives[2]}), int64_t(m.packs.size()));
  EXPECT_EQ(logits_of(p.three, streamed()), ref);
  EXPECT_TRUE(verify_checkpoint(p.three, false).ok());
  // A pack file missing on one drive.
  const std::string pack = Manifest::load(p.three + "/" + kManifestFile).pack_path(p.three, m.packs.size() - 1);
  fs::remove(pack);
  err = error_of([&] { load_model(p.three); });
  EXPECT_NE(err.find(pack), std::string::npos) << err;
  r = verify_checkpoint(p.three, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.problems[0].find(pack), std::string::npos) << r.problems[0];
  // --expert-dirs names a directory that does not exist, or needs --pack-experts.
  err = error_of([&] { prepare({p.one, "bf16", false, true, {p.drives[0], p.tmp.file("nope")}}); });
  EXPECT_NE(err.find(p.tmp.file("nope")), std::string::npos) << err;
  err = error_of([&] { prepare({p.one, "bf16", false, false, {p.drives[0]}}); });
  EXPECT_NE(err.find("--pack-experts"), std::string::npos) << err;
}

TEST(ExpertDrives, CommandLineSpreadsVerifiesAndRelocates) {
  test::TempDir tmp;
  const std::string dir = test::copy_golden(tmp, "qwen3_moe_tiny");
  const std::string a = tmp.file("a"), b = tmp.file("b"), c = tmp.file("c");
  fs::create_directories(a);
  fs::create_directories(b);
  auto r = test::run_sluice({"prepare", "--model", dir, "--pack-experts", "--expert-dirs", a + "," + b, "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Manifest::load(dir + "/" + kManifestFile).expert_dirs, (std::vector<std::string>{a, b}));
  EXPECT_EQ(test::run_sluice({"verify", "--model", dir}).exit_code, 0);
  // `sluice info --json` names the files the experts are read from: the packs, on both drives.
  r = test::run_sluice({"info", "--model", dir, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto info = nlohmann::json::parse(r.out);
  std::set<std::string> drives;
  for (const auto& f : info.at("expert_files")) {
    const std::string path = f.get<std::string>();
    EXPECT_TRUE(fs::exists(path)) << path;
    drives.insert(fs::path(path).parent_path().string());
  }
  EXPECT_EQ(drives, (std::set<std::string>{a, b})) << r.out;
  fs::rename(b, c);
  r = test::run_sluice({"verify", "--model", dir});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE((r.out + r.err).find(b), std::string::npos) << r.out << r.err;
  r = test::run_sluice({"prepare", "--model", dir, "--expert-dirs", a + "," + c, "--relocate"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_sluice({"verify", "--model", dir});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

TEST(ExpertDrives, ManifestPackDirectoriesAreChecked) {
  test::TempDir tmp;
  Manifest m;
  m.spine_format = "bf16";
  m.files = {{"model.safetensors", 10}, {"p0", 20}, {"p1", 30}};
  m.packs = {"p0", "p1"};
  m.expert_dirs = {"/mnt/a", "/mnt/b"};
  m.pack_dirs = {1, 0};
  const std::string path = tmp.file(kManifestFile);
  m.save(path);
  const Manifest back = Manifest::load(path);
  EXPECT_EQ(back.file_path("/m", 0), "/m/model.safetensors");
  EXPECT_EQ(back.file_path("/m", 1), "/mnt/b/p0");
  EXPECT_EQ(back.file_path("/m", 2), "/mnt/a/p1");
  for (const char* bad : {R"([1, 2])", R"([0])"}) {
    nlohmann::json j;
    std::ifstream(path) >> j;
    j["pack_dirs"] = nlohmann::json::parse(bad);
    std::ofstream(path) << j.dump();
    const std::string err = error_of([&] { Manifest::load(path); });
    EXPECT_NE(err.find("pack_dirs"), std::string::npos) << bad << ": " << err;
    EXPECT_NE(err.find(path), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace sluice::expert_drives_test
