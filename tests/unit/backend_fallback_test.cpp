// The compute seam's optional ops (compute/backend.h): a backend with only the
// generic ops runs every family through the host fallback with the CPU's bits,
// and one that refuses the fallback is refused at load, naming the op.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "compute/cpu/cpu_backend.h"
#include "format/checkpoint.h"
#include "format/config.h"
#include "model/architectures.h"
#include "model/decoder.h"
#include "support/golden_logits.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::backend_fallback_test {
namespace {

// A third backend as it would start: the generic ops only (here, the CPU's), none of the
// architecture ops, so every one of those runs through the base class's host fallback.
class GenericOnlyBackend : public Backend {
 public:
  explicit GenericOnlyBackend(bool falls_back = true) : falls_back_(falls_back) {}
  const char* name() const override { return "generic-only"; }
  bool host_fallback() const override { return falls_back_; }

  float* allocate(int64_t floats) override { return cpu().allocate(floats); }
  void deallocate(float* p) override { cpu().deallocate(p); }
  void upload(const float* host, Tensor dst) override { cpu().upload(host, dst); }
  void download(Tensor src, float* host) override { cpu().download(src, host); }
  void copy(Tensor src, Tensor dst) override { cpu().copy(src, dst); }
  void zero(Tensor dst) override { cpu().zero(dst); }
  Matrix matrix(const QMatrix& host) override { return cpu().matrix(host); }
  Vector vector(const float* host, int64_t n) override { return cpu().vector(host, n); }
  void matmul(const Matrix& w, Tensor x, Tensor y) override { cpu().matmul(w, x, y); }
  void rmsnorm(Tensor x, const Vector& w, float eps, Tensor out, int64_t group) override {
    cpu().rmsnorm(x, w, eps, out, group);
  }
  void l2norm(Tensor x, int64_t group, float eps, float mul) override { cpu().l2norm(x, group, eps, mul); }
  void add(Tensor x, Tensor y) override { cpu().add(x, y); }
  void add_row(const Vector& b, Tensor y) override { cpu().add_row(b, y); }
  void mul_sigmoid(Tensor g, Tensor y) override { cpu().mul_sigmoid(g, y); }
  void sigmoid(Tensor x) override { cpu().sigmoid(x); }
  void gated(const GatedActivation& act, Tensor g, Tensor u, Tensor out) override { cpu().gated(act, g, u, out); }
  void rope(const Rope& rope, Tensor x, int64_t heads, int64_t stride, int64_t offset, int64_t pos0) override {
    cpu().rope(rope, x, heads, stride, offset, pos0);
  }
  void embed(const Matrix& table, const int32_t* tokens, int64_t n, Tensor out) override {
    cpu().embed(table, tokens, n, out);
  }
  void gather_rows(Tensor src, const std::vector<int64_t>& rows, Tensor dst) override {
    cpu().gather_rows(src, rows, dst);
  }
  void expert_ffn(const ExpertWeights& w, const GatedActivation& act, Tensor x, Tensor y) override {
    cpu().expert_ffn(w, act, x, y);
  }
  void scatter_add(Tensor src, const std::vector<int64_t>& rows, const std::vector<float>& weights,
                   Tensor acc) override {
    cpu().scatter_add(src, rows, weights, acc);
  }

  uint64_t fallback_calls() const {
    uint64_t n = 0;
    for (Op op : kArchitectureOps) n += host_fallback_calls(op);
    return n;
  }

 private:
  static Backend& cpu() { return cpu_backend(); }
  bool falls_back_;
};

std::unique_ptr<Decoder> build_on(const std::string& dir, Backend& be) {
  return build_decoder(Config::load(dir), std::make_unique<Checkpoint>(dir, /*use_prepared_spine=*/false), be);
}

// The ops each golden family needs, and the one a refusing backend is refused for first.
struct FamilyOps {
  const char* golden;
  std::set<Op> ops;
  Op first;
};
const FamilyOps kFamilies[] = {
    {"qwen3_moe_tiny", {Op::GqaAttend}, Op::GqaAttend},
    {"gpt_oss_tiny", {Op::GqaAttend}, Op::GqaAttend},
    {"deepseek_v3_tiny", {Op::MlaAttend}, Op::MlaAttend},
    {"kimi_linear_tiny", {Op::MlaAttend, Op::ShortConv, Op::KdaGate, Op::DeltaRule}, Op::ShortConv},
    {"kimi_k3_tiny", {Op::MlaAttend, Op::ShortConv, Op::KdaGate, Op::DeltaRule, Op::AttnResMix}, Op::ShortConv},
};

TEST(BackendFallback, CpuAndNamesCoverEveryOp) {
  std::set<std::string> names;
  for (Op op : kArchitectureOps) {
    EXPECT_TRUE(cpu_backend().supports(op)) << op_name(op);
    EXPECT_FALSE(GenericOnlyBackend().supports(op)) << op_name(op);
    names.insert(std::string(op_name(op)));
  }
  EXPECT_EQ(names.size(), std::size(kArchitectureOps));
  EXPECT_EQ(names.count("?"), 0u);
}

// Each family, prefilled then decoded token by token, on a backend that lacks every
// architecture op: the same logits as the CPU's, bit for bit, through the fallback.
TEST(BackendFallback, GenericOnlyBackendGivesTheCpuLogits) {
  for (const FamilyOps& f : kFamilies) {
    SCOPED_TRACE(f.golden);
    const std::string dir = test::fixture(std::string("golden/") + f.golden);
    const std::vector<int32_t> ids = test::golden_ids(f.golden);
    GenericOnlyBackend generic;
    const auto on_cpu = build_on(dir, cpu_backend());
    const auto on_generic = build_on(dir, generic);
    const std::vector<float> want = test::prefill_half_then_decode(*on_cpu, ids);
    const std::vector<float> got = test::prefill_half_then_decode(*on_generic, ids);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(test::same_bits(got, want));
    for (Op op : kArchitectureOps) {
      if (f.ops.count(op)) EXPECT_GT(generic.host_fallback_calls(op), 0u) << op_name(op);
      else EXPECT_EQ(generic.host_fallback_calls(op), 0u) << op_name(op);
    }
    EXPECT_EQ(cpu_backend().host_fallback_calls(f.first), 0u);
  }
}

// A backend that lacks the op and will not fall back is refused when the model is built.
TEST(BackendFallback, RefusalNamesTheOpAndTheBackend) {
  for (const FamilyOps& f : kFamilies) {
    SCOPED_TRACE(f.golden);
    GenericOnlyBackend refusing(/*falls_back=*/false);
    const std::string err =
        test::error_of([&] { build_on(test::fixture(std::string("golden/") + f.golden), refusing); });
    EXPECT_NE(err.find("the generic-only backend cannot run"), std::string::npos) << err;
    EXPECT_NE(err.find("does not implement " + std::string(op_name(f.first))), std::string::npos) << err;
    EXPECT_NE(err.find("does not fall back to the CPU"), std::string::npos) << err;
    EXPECT_EQ(refusing.fallback_calls(), 0u);
  }
  GenericOnlyBackend refusing(false);
  EXPECT_EQ(test::error_of([&] { require_op(refusing, Op::AttnResMix, "Block AttnRes"); }),
            "the generic-only backend cannot run Block AttnRes: it does not implement attn_res_mix and does not fall "
            "back to the CPU for the ops it lacks");
  EXPECT_EQ(test::error_of([&] { require_op(GenericOnlyBackend(true), Op::AttnResMix, "Block AttnRes"); }), "");
  EXPECT_EQ(test::error_of([&] { require_op(cpu_backend(), Op::AttnResMix, "Block AttnRes"); }), "");
}

// The fallback reads weights where the host has them; a weight with only a device copy is an error
// naming the op, not a read of device memory.
TEST(BackendFallback, WeightWithoutHostBytesIsAnError) {
  GenericOnlyBackend generic;
  const int64_t H = 2, Dh = 4;
  std::vector<float> a_log(size_t(H), 0.5f), dt(size_t(H * Dh), 0.1f), device_only(size_t(H), 0.0f);
  Buffer z(generic, 3, H * Dh);
  const KdaGate gate{.kind = KdaGate::Softplus, .lower_bound = -5.0f, .n_heads = H, .head_dim = Dh};
  const Vector dt_bias{dt.data(), nullptr, H * Dh};
  EXPECT_EQ(test::error_of([&] { generic.kda_gate(gate, Vector{a_log.data(), nullptr, H}, dt_bias, z); }), "");
  const std::string err =
      test::error_of([&] { generic.kda_gate(gate, Vector{nullptr, device_only.data(), H}, dt_bias, z); });
  EXPECT_NE(err.find("the generic-only backend does not compute kda_gate itself"), std::string::npos) << err;
  EXPECT_NE(err.find("has only the backend's copy"), std::string::npos) << err;
}

// The fallback's copies keep an op's in-place semantics and its strided views: short_conv rewrites x and
// its history, here views with a row stride wider than their columns, as the CPU does.
TEST(BackendFallback, InPlaceOpsOnStridedViewsMatchTheCpu) {
  GenericOnlyBackend generic;
  const int64_t T = 5, C = 6, K = 4, LD = 9;
  std::vector<float> w(size_t(C * K));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * float(int(i % 7) - 3);
  auto fill = [](std::vector<float>& v, float base) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = base + 0.01f * float(i);
  };
  std::vector<float> x1(size_t(T * LD)), h1(size_t((K - 1) * LD));
  fill(x1, -0.2f);
  fill(h1, 0.3f);
  std::vector<float> x2 = x1, h2 = h1;
  const Vector wv{w.data(), nullptr, C * K};
  cpu_backend().short_conv(wv, K, Tensor(h1.data(), K - 1, C, LD), Tensor(x1.data(), T, C, LD));
  generic.short_conv(wv, K, Tensor(h2.data(), K - 1, C, LD), Tensor(x2.data(), T, C, LD));
  EXPECT_EQ(generic.host_fallback_calls(Op::ShortConv), 1u);
  EXPECT_TRUE(test::same_bits(x1, x2));
  EXPECT_TRUE(test::same_bits(h1, h2));
}

}  // namespace
}  // namespace sluice::backend_fallback_test
