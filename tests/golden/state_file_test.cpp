// Saved session states (runtime/state_file.h) on every golden architecture:
// decoding after a restore gives bit for bit the logits of decoding without
// one, a cache-only state cuts to any prefix, and a truncated, corrupted,
// other-version or other-model file is refused naming the file, leaving the
// session it was meant for as it was.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <xxhash.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/engine.h"
#include "engine/model_identity.h"
#include "kernels/isa.h"
#include "runtime/session.h"
#include "runtime/state_file.h"
#include "support/test_device.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::state_file_test {
namespace {

struct Arch {
  const char* name;
  const char* dir;  // under tests/fixtures
};
// CTest's test list names the case instead of dumping its bytes.
void PrintTo(const Arch& a, std::ostream* os) { *os << a.name; }

const Arch kArchs[] = {
    {"deepseek_v3", "golden/deepseek_v3_tiny"},      {"kimi_k2_fp8", "golden/deepseek_v3_tiny_fp8"},
    {"deepseek_v3_int4", "golden/deepseek_v3_tiny_int4"}, {"qwen3_moe", "golden/qwen3_moe_tiny"},
    {"gpt_oss", "golden/gpt_oss_tiny"},              {"kimi_linear", "golden/kimi_linear_tiny"},
    {"kimi_k3", "golden/kimi_k3_tiny"},              {"sluice_k3_mini", "../../models/sluice-k3-mini"},
};

// Token ids spread over the vocabulary; 20 positions pass gpt_oss_tiny's window of 8.
std::vector<int32_t> tokens(int64_t vocab, int n, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t((uint64_t(i) * 7919 + uint64_t(salt) * 104729 + 3) % uint64_t(vocab)));
  return t;
}

// Logits of each of `tail` fed one token at a time.
std::vector<std::vector<float>> decode(Session& s, const std::vector<int32_t>& tail) {
  std::vector<std::vector<float>> out;
  for (int32_t t : tail) out.push_back(s.feed({t}));
  return out;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) return false;
  return true;
}

class StateFile : public ::testing::TestWithParam<Arch> {};

TEST_P(StateFile, RestoreDecodesBitForBit) {
  auto model = load_model(test::fixture(GetParam().dir), test::on_test_device());
  const std::string id = model_identity(*model);
  const int64_t V = model->info().vocab;
  const auto prompt = tokens(V, 20, 1), tail = tokens(V, 5, 2);
  test::TempDir tmp;
  const std::string path = tmp.file("state.sluice");

  Session a(*model);
  a.feed(prompt);
  write_state_file(path, a.image(), id);
  const auto want = decode(a, tail);

  Session b(*model);
  b.feed(tokens(V, 3, 9));  // restoring replaces whatever the session held
  b.restore(read_state_file(path, id), 20);
  EXPECT_EQ(b.tokens(), prompt);
  EXPECT_TRUE(same_bits(decode(b, tail), want)) << GetParam().name << ": logits after restore differ";

  // Saved while the server's kind of mark is open: the same bytes as without it.
  Session c(*model);
  c.feed(std::vector<int32_t>(prompt.begin(), prompt.end() - 1));
  c.checkpoint(/*record=*/false);
  c.feed({prompt.back()});
  EXPECT_EQ(encode_state(c.image(), id), encode_state(read_state_file(path, id), id));

  // A prefix: any length for caches, only all of it for recurrent state.
  const SessionImage image = read_state_file(path, id);
  Session d(*model);
  if (image.can_cut()) {
    d.restore(image, 9);
    Session fresh(*model);
    fresh.feed(std::vector<int32_t>(prompt.begin(), prompt.begin() + 9));
    std::vector<int32_t> rest(prompt.begin() + 9, prompt.end());
    rest.insert(rest.end(), tail.begin(), tail.end());
    EXPECT_TRUE(same_bits(decode(d, rest), decode(fresh, rest))) << GetParam().name << ": cut state differs";
  } else {
    try {
      d.restore(image, 9);
      ADD_FAILURE() << GetParam().name << ": a recurrent state was cut";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("recurrent"), std::string::npos) << e.what();
    }
    EXPECT_EQ(d.position(), 0);
  }
  std::printf("[state] %-16s %lld positions: %lld bytes on disk, %s\n", GetParam().name, (long long)image.positions(),
              (long long)std::filesystem::file_size(path), image.can_cut() ? "any prefix" : "recurrent: whole only");
}

INSTANTIATE_TEST_SUITE_P(Architectures, StateFile, ::testing::ValuesIn(kArchs),
                         [](const auto& info) { return std::string(info.param.name); });

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// A refused file leaves the session as it was: same tokens, same next logits.
void expect_refused(Session& s, const std::string& path, const std::string& id, const std::string& says) {
  const auto before = s.tokens();
  try {
    s.restore(read_state_file(path, id), 20);
    ADD_FAILURE() << "accepted: " << says;
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find(path), std::string::npos) << w;
    if (!says.empty()) {
      EXPECT_NE(w.find(says), std::string::npos) << "wanted '" << says << "' in: " << w;
    }
  }
  EXPECT_EQ(s.tokens(), before);
}

TEST(StateFileErrors, BadFilesAreRefusedAndChangeNothing) {
  auto model = load_model(test::fixture("golden/kimi_k3_tiny"), test::on_test_device());
  const std::string id = model_identity(*model);
  const int64_t V = model->info().vocab;
  test::TempDir tmp;
  Session a(*model);
  a.feed(tokens(V, 20, 1));
  const std::vector<uint8_t> good = encode_state(a.image(), id);
  const std::string path = tmp.file("bad.sluice");

  Session s(*model), twin(*model);
  s.feed(tokens(V, 4, 5));
  twin.feed(tokens(V, 4, 5));

  for (size_t n : {size_t(0), size_t(1), size_t(8), size_t(15), good.size() / 2, good.size() - 9, good.size() - 1}) {
    write_bytes(path, std::vector<uint8_t>(good.begin(), good.begin() + std::ptrdiff_t(n)));
    expect_refused(s, path, id, "");
  }
  // One flipped byte anywhere: every byte of the headers, then a spread over the values.
  std::vector<size_t> at;
  for (size_t i = 0; i < 200; ++i) at.push_back(i);
  for (size_t i = 0; i < 300; ++i) at.push_back(200 + (good.size() - 201) * i / 299);
  for (size_t i : at) {
    std::vector<uint8_t> b = good;
    b[i] ^= 0x10;
    write_bytes(path, b);
    expect_refused(s, path, id, "");
  }
  {  // The checksum catches a flip in the values.
    std::vector<uint8_t> b = good;
    b[good.size() / 2] ^= 1;
    write_bytes(path, b);
    expect_refused(s, path, id, "XXH3");
  }
  {  // Another version, checksummed as such.
    std::vector<uint8_t> b = good;
    b[8] = 2;
    const uint64_t sum = XXH3_64bits(b.data(), b.size() - 8);
    std::memcpy(b.data() + b.size() - 8, &sum, 8);
    write_bytes(path, b);
    expect_refused(s, path, id, "version 2");
  }
  write_bytes(path, encode_state(a.image(), "qwen3_moe cpu avx2 0123"));
  expect_refused(s, path, id, "another model");
  // Another model's state under this one's identity: its shapes do not fit.
  auto other = load_model(test::fixture("golden/qwen3_moe_tiny"), test::on_test_device());
  Session o(*other);
  o.feed(tokens(other->info().vocab, 20, 1));
  write_bytes(path, encode_state(o.image(), id));
  try {
    s.restore(read_state_file(path, id), 20);
    ADD_FAILURE() << "another architecture's state was restored";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer"), std::string::npos) << e.what();
  }
  write_bytes(path, std::vector<uint8_t>{'n', 'o', 'p', 'e', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  expect_refused(s, path, id, "not a sluice state file");
  expect_refused(s, tmp.file("missing.sluice"), id, "cannot open");

  const auto t = tokens(V, 3, 6);
  EXPECT_EQ(s.tokens(), twin.tokens());
  EXPECT_TRUE(same_bits(decode(s, t), decode(twin, t))) << "a refused restore changed the session";
}

TEST(StateFileErrors, IdentityFollowsTheModel) {
  const std::string a = model_identity(*load_model(test::fixture("golden/qwen3_moe_tiny")));
  EXPECT_EQ(a, model_identity(*load_model(test::fixture("golden/qwen3_moe_tiny"))));
  // States saved by a build whose kernels computed other bits are another identity.
  EXPECT_NE(a.find(fmt::format(" r{} ", kernels::kNumericsRevision)), std::string::npos) << a;
  EXPECT_NE(a, model_identity(*load_model(test::fixture("golden/deepseek_v3_tiny"))));
  EXPECT_NE(model_identity(*load_model(test::fixture("golden/deepseek_v3_tiny"))),
            model_identity(*load_model(test::fixture("golden/deepseek_v3_tiny_fp8"))));
  test::TempDir tmp;
  const std::string copy = test::copy_golden(tmp, "qwen3_moe_tiny");
  // A copy that keeps the files' times (cp -p, rsync -a) is the same weights; the times are part of
  // the identity so that weights changed in place are not taken for the old ones (issue 38, finding 5).
  for (const auto& e : std::filesystem::directory_iterator(copy))
    std::filesystem::last_write_time(
        e.path(), std::filesystem::last_write_time(test::fixture("golden/qwen3_moe_tiny/" + e.path().filename().string())));
  EXPECT_EQ(a, model_identity(*load_model(copy))) << "the identity is the weights', not the directory's";
  {
    test::TempDir tmp2;
    const std::string other = test::copy_golden(tmp2, "qwen3_moe_tiny");
    for (const auto& e : std::filesystem::directory_iterator(other))
      std::filesystem::last_write_time(e.path(), std::filesystem::last_write_time(copy + "/" + e.path().filename().string()));
    std::filesystem::last_write_time(other + "/model.safetensors",
                                     std::filesystem::last_write_time(copy + "/model.safetensors") + std::chrono::seconds(1));
    EXPECT_NE(a, model_identity(*load_model(other))) << "a weights file written again is another identity";
  }
  std::string cfg;
  {
    std::ifstream f(copy + "/config.json");
    cfg.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  std::ofstream(copy + "/config.json") << cfg << "\n";
  EXPECT_NE(a, model_identity(*load_model(copy))) << "config.json is part of the identity";
}

}  // namespace
}  // namespace sluice::state_file_test
