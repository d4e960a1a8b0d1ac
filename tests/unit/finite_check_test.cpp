// Non-finite values are an error naming where they first appear, never NaN
// logits sampled into NUL bytes: NaN weights in one layer, random bytes over a
// weight, and a config whose rms_norm_eps is negative.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "compute/backend.h"
#include "compute/cpu/cpu_backend.h"
#include "format/config.h"
#include "model/architectures.h"
#include "model/decoder.h"
#include "engine/engine.h"
#include "format/safetensors.h"
#include "runtime/session.h"
#include "support/test_support.h"
#include "util/cancelled.h"
#include "util/error.h"

namespace sluice::finite_check_test {
namespace {

// Overwrites `tensor` in DIR/model.safetensors with the bytes fill(i) gives.
template <class Fill>
void overwrite_tensor(const std::string& dir, const std::string& tensor, Fill fill) {
  const std::string path = dir + "/model.safetensors";
  uint64_t offset = 0, bytes = 0;
  {
    SafetensorsFile f(path);
    const TensorView t = f.get(tensor);
    offset = t.file_offset;
    bytes = t.nbytes();
  }
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(std::streamoff(offset));
  for (uint64_t i = 0; i < bytes; ++i) io.put(char(fill(i)));
  ASSERT_TRUE(io.good());
}

// The error of a 6-token feed, or "" when it succeeded.
std::string feed_error(const std::string& dir) {
  auto m = load_model(dir);
  Session s(*m);
  try {
    s.feed({5, 6, 7, 8, 9, 10});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Backend::first_nonfinite, the CPU's in-place scan and the default (download, then scan) that
// other backends inherit: the first non-finite value in packed order, only inside the view.
TEST(FiniteCheck, BackendFindsTheFirstNonFiniteValueInPackedOrder) {
  const int64_t T = 4, D = 5, LD = 8;
  std::vector<float> v(size_t(T * LD), 1.0f);
  v[size_t(1 * LD + 6)] = NAN;  // outside the view
  Tensor x(v.data(), T, D, LD);
  // The base class's scan, through the CPU backend's download.
  auto base = [&](Tensor t) { return cpu_backend().Backend::first_nonfinite(t); };
  EXPECT_EQ(cpu_backend().first_nonfinite(x), -1);
  EXPECT_EQ(base(x), -1);
  v[size_t(3 * LD + 0)] = INFINITY;
  v[size_t(2 * LD + 4)] = -INFINITY;
  EXPECT_EQ(cpu_backend().first_nonfinite(x), 2 * D + 4);
  EXPECT_EQ(base(x), 2 * D + 4);
  EXPECT_EQ(cpu_backend().first_nonfinite(x.row_range(3, 1)), 0);
  EXPECT_EQ(base(x.row_range(3, 1)), 0);
}

TEST(FiniteCheck, NanWeightsNameTheLayer) {
  test::TempDir tmp;
  const std::string dir = test::copy_golden(tmp, "qwen3_moe_tiny");
  EXPECT_EQ(feed_error(dir), "");
  // bf16 0x7FC0 (quiet NaN), little-endian, in layer 1's attention output projection.
  overwrite_tensor(dir, "model.layers.1.self_attn.o_proj.weight", [](uint64_t i) { return i % 2 ? 0x7F : 0xC0; });
  const std::string err = feed_error(dir);
  EXPECT_NE(err.find("the hidden state after layer 1 is not finite"), std::string::npos) << err;
}

TEST(FiniteCheck, RandomBytesOverAWeightAreAnErrorOrFinite) {
  test::TempDir tmp;
  const std::string dir = test::copy_golden(tmp, "qwen3_moe_tiny");
  std::mt19937 rng(17);
  // Random bf16 bit patterns include NaN/Inf codes (exponent all ones) with probability 1/256 each.
  overwrite_tensor(dir, "model.layers.0.self_attn.q_proj.weight", [&](uint64_t) { return uint8_t(rng()); });
  const std::string err = feed_error(dir);
  EXPECT_NE(err.find("is not finite"), std::string::npos) << (err.empty() ? "fed without an error" : err);
}

TEST(FiniteCheck, NegativeRmsNormEpsNamesTheFirstLayer) {
  test::TempDir tmp;
  const std::string dir = test::copy_golden(tmp, "qwen3_moe_tiny");
  nlohmann::json cfg;
  std::ifstream(dir + "/config.json") >> cfg;
  cfg["rms_norm_eps"] = -1;
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  std::string err;
  try {
    err = feed_error(dir);
  } catch (const Error& e) {
    err = e.what();  // refused at load is fine too
  }
  EXPECT_NE(err.find("not finite"), std::string::npos) << (err.empty() ? "fed without an error" : err);
}

// E8M0 scale codes (MXFP4 experts): 0xFF is NaN (OCP MX), so every weight of the
// block decodes to NaN and the first pass that routes to it names the layer;
// 0x00 is 2^-127, a valid (tiny) scale, and decodes finite.
TEST(FiniteCheck, E8m0ScaleCodes) {
  for (const int code : {0xFF, 0x00}) {
    test::TempDir tmp;
    const std::string dir = test::copy_golden(tmp, "gpt_oss_tiny");
    overwrite_tensor(dir, "model.layers.0.mlp.experts.gate_up_proj_scales", [&](uint64_t) { return uint8_t(code); });
    const std::string err = feed_error(dir);
    if (code == 0xFF)
      EXPECT_NE(err.find("the hidden state after layer 0 is not finite"), std::string::npos) << err;
    else
      EXPECT_EQ(err, "") << "scale code 0x00";
  }
}

// The CPU's products with a GPU's deferred finite checks (the base class's record): what the
// decoder does on a GPU, observable here.
class DeferringCpuBackend : public CpuBackend {
 public:
  bool defers_finite_checks() const override { return true; }
  void watch_nonfinite(Tensor x, int64_t tag) override {
    ++watched;
    Backend::watch_nonfinite(x, tag);
  }
  int watched = 0;
};

// The error of feeding `tokens` to the model in DIR on `be` (in spans of `chunk` when > 0), or "".
std::string decoder_error(const std::string& dir, Backend& be, const std::vector<int32_t>& tokens, int64_t chunk = 0,
                          const std::function<bool()>* stop = nullptr) {
  auto dec = build_decoder(Config::load(dir), std::make_unique<Checkpoint>(dir, false), be);
  auto st = dec->new_state();
  st->stop = stop;
  std::vector<float> logits(size_t(dec->info().vocab));
  try {
    if (chunk > 0) dec->forward_span(*st, tokens.data(), int64_t(tokens.size()), chunk, logits.data());
    else dec->forward(*st, tokens.data(), int64_t(tokens.size()), logits.data(), false, nullptr);
  } catch (const Error& e) {
    return e.what();
  } catch (const Cancelled& e) {
    return e.what();
  }
  return "";
}

TEST(FiniteCheck, DeferredChecksNameTheSamePlaceOncePerPass) {
  test::TempDir tmp, tmp_clean;
  const std::string dir = test::copy_golden(tmp, "qwen3_moe_tiny");
  const std::string clean = test::copy_golden(tmp_clean, "qwen3_moe_tiny");
  // NaN in one row of layer 1's output projection, and layer 2's too (the first layer must win).
  overwrite_tensor(dir, "model.layers.1.self_attn.o_proj.weight", [](uint64_t i) { return i % 2 ? 0x7F : 0xC0; });
  overwrite_tensor(dir, "model.layers.2.self_attn.o_proj.weight", [](uint64_t i) { return i % 2 ? 0x7F : 0xC0; });
  const std::vector<int32_t> tokens{5, 6, 7, 8, 9, 10};
  DeferringCpuBackend deferring;
  for (const int64_t chunk : {0, 4}) {  // one pass; spans of 4-token chunks
    const std::string now = decoder_error(dir, cpu_backend(), tokens, chunk);
    ASSERT_NE(now.find("the hidden state after layer 1 is not finite"), std::string::npos) << now;
    deferring.watched = 0;
    EXPECT_EQ(decoder_error(dir, deferring, tokens, chunk), now) << "chunk " << chunk;
    EXPECT_GE(deferring.watched, 3) << "every layer is watched, none stops the pass";
    EXPECT_EQ(decoder_error(clean, deferring, tokens, chunk), "");
  }
  // A pass cancelled after layer 1 leaves its record; the next pass on the backend must not report it.
  int calls = 0;
  const std::function<bool()> stop = [&] { return ++calls == 3; };  // before layer 2
  EXPECT_NE(decoder_error(dir, deferring, tokens, 0, &stop), "");
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(decoder_error(clean, deferring, tokens), "");
}

}  // namespace
}  // namespace sluice::finite_check_test
