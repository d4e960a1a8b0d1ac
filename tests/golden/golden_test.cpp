// Every golden checkpoint against its float64 reference: logits, per-layer
// hidden states and final norm at every position, for a full pass and for
// cached decoding from position 1 and T/2; greedy ids where the reference's
// top-1/top-2 margin exceeds our numeric error. Each model has its own
// tolerance, about 5x the largest relative error measured; every run prints the
// errors it measured. Fixtures where gpt-oss's SwiGLU clamp and K3's SiTU
// saturation fire, and 320-position references for KDA/MLA models, are included.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "engine/engine.h"
#include "kernels/isa.h"
#include "runtime/session.h"
#include "support/test_device.h"
#include "support/test_support.h"

namespace sluice::golden_test {
namespace {

constexpr double kGreedyMargin = 1e-2;

struct GoldenCase {
  const char* name;
  const char* dir;  // under tests/fixtures (the shipped model: models/)
  const char* ref;  // reference file, relative to tests/fixtures
  double tol;       // max relative L2 error per position, any tensor, any split
};

// Tolerances: ~5x the worst error measured over the three splits and every
// tensor (scalar kernels, 2-core AVX2 machine; the AVX-512 errors quoted in issue
// 17 are within them), e.g. deepseek_v3_tiny_fp8 4.2e-6, gpt_oss_clamp 4.2e-6,
// kimi_k3_long 1.8e-5, sluice_k3_mini 1.3e-6. A change that moves an error past
// its tolerance changed the model's function, or its precision, by 5x.
const GoldenCase kCases[] = {
    {"deepseek_v3_tiny", "golden/deepseek_v3_tiny", "golden/deepseek_v3_tiny/reference.safetensors", 2e-5},
    {"deepseek_v3_tiny_fp8", "golden/deepseek_v3_tiny_fp8", "golden/deepseek_v3_tiny_fp8/reference.safetensors", 2e-5},
    {"deepseek_v3_tiny_int4", "golden/deepseek_v3_tiny_int4", "golden/deepseek_v3_tiny_int4/reference.safetensors", 2e-5},
    {"qwen3_moe_tiny", "golden/qwen3_moe_tiny", "golden/qwen3_moe_tiny/reference.safetensors", 7e-6},
    {"gpt_oss_tiny", "golden/gpt_oss_tiny", "golden/gpt_oss_tiny/reference.safetensors", 1e-5},
    {"gpt_oss_clamp", "golden/gpt_oss_clamp", "golden/gpt_oss_clamp/reference.safetensors", 2.5e-5},
    {"kimi_linear_tiny", "golden/kimi_linear_tiny", "golden/kimi_linear_tiny/reference.safetensors", 7e-5},
    {"kimi_linear_long", "golden/kimi_linear_tiny", "golden/kimi_linear_tiny/reference_long.safetensors", 7e-5},
    {"kimi_k3_tiny", "golden/kimi_k3_tiny", "golden/kimi_k3_tiny/reference.safetensors", 7e-5},
    {"kimi_k3_long", "golden/kimi_k3_tiny", "golden/kimi_k3_tiny/reference_long.safetensors", 1e-4},
    {"kimi_k3_situ", "golden/kimi_k3_situ", "golden/kimi_k3_situ/reference.safetensors", 6e-5},
    {"sluice_k3_mini", "../../models/sluice-k3-mini", "golden/sluice_k3_mini_reference.safetensors", 7e-6},
};

const GoldenCase& golden(const std::string& name) {
  for (const auto& c : kCases)
    if (name == c.name) return c;
  throw std::runtime_error("no golden case " + name);
}
std::string model_dir(const std::string& name) { return test::fixture(golden(name).dir); }
std::string ref_file(const std::string& name) { return test::fixture(golden(name).ref); }

class Golden : public ::testing::TestWithParam<std::string> {};

std::vector<int32_t> ids_of(const std::vector<int64_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); }

// Runs the first K tokens as one prefill and the rest one token at a time.
void run_split(const Model& m, const std::vector<int32_t>& ids, int64_t K, std::vector<double>* logits,
               ForwardTrace* trace) {
  Session s(m);
  auto first = s.feed_all(std::vector<int32_t>(ids.begin(), ids.begin() + K), trace);
  logits->assign(first.begin(), first.end());
  for (size_t t = size_t(K); t < ids.size(); ++t) {
    ForwardTrace step;
    auto l = s.feed_all({ids[t]}, trace ? &step : nullptr);
    logits->insert(logits->end(), l.begin(), l.end());
    if (trace) {
      for (size_t i = 0; i < step.hidden.size(); ++i)
        trace->hidden[i].insert(trace->hidden[i].end(), step.hidden[i].begin(), step.hidden[i].end());
      trace->final_hidden.insert(trace->final_hidden.end(), step.final_hidden.begin(), step.final_hidden.end());
    }
  }
}

void check_against_reference(const std::string& name, int64_t K) {
  const GoldenCase& gc = golden(name);
  auto model = load_model(model_dir(name), test::on_test_device());
  const auto& info = model->info();
  const std::string ref = ref_file(name);
  auto ids = ids_of(test::read_i64(ref, "input_ids"));
  const int64_t T = int64_t(ids.size());
  std::vector<double> logits;
  ForwardTrace trace;
  run_split(*model, ids, K == 0 ? T : K, &logits, &trace);
  const double e_logits = test::max_row_rel_error(logits, test::read_f64(ref, "logits"), info.vocab);
  EXPECT_LE(e_logits, gc.tol) << name << " logits, decode from " << K;
  ASSERT_EQ(int64_t(trace.hidden.size()), info.n_layers);
  double e_hidden = 0;
  for (int64_t l = 0; l < info.n_layers; ++l) {
    auto r = test::read_f64(ref, "hidden." + std::to_string(l));
    std::vector<double> mine(trace.hidden[size_t(l)].begin(), trace.hidden[size_t(l)].end());
    const double e = test::max_row_rel_error(mine, r, info.hidden);
    e_hidden = std::max(e_hidden, e);
    EXPECT_LE(e, gc.tol) << name << " hidden." << l << ", decode from " << K;
  }
  std::vector<double> mine(trace.final_hidden.begin(), trace.final_hidden.end());
  const double e_final = test::max_row_rel_error(mine, test::read_f64(ref, "final_hidden"), info.hidden);
  EXPECT_LE(e_final, gc.tol) << name << " final_hidden, decode from " << K;
  std::printf("[golden] %-22s isa %-6s T=%-3lld decode from %-3lld max rel error: logits %.2e, hidden %.2e, final %.2e "
              "(tolerance %.1e)\n",
              name.c_str(), std::string(kernels::active_isa().name).c_str(), (long long)T, (long long)K, e_logits, e_hidden,
              e_final, gc.tol);
}

TEST_P(Golden, FullPass) { check_against_reference(GetParam(), 0); }
TEST_P(Golden, DecodeFromOne) { check_against_reference(GetParam(), 1); }
TEST_P(Golden, DecodeFromHalf) {
  const int64_t T = int64_t(test::read_i64(ref_file(GetParam()), "input_ids").size());
  check_against_reference(GetParam(), T / 2);
}

// Teacher-forced: after the prompt and each reference greedy token, our argmax
// must equal the reference's next greedy id wherever its margin is clear.
TEST_P(Golden, GreedyIdsTeacherForced) {
  const std::string name = GetParam();
  auto model = load_model(model_dir(name), test::on_test_device());
  auto prompt = ids_of(test::read_i64(ref_file(name), "greedy_prompt"));
  auto greedy = ids_of(test::read_i64(ref_file(name), "greedy_ids"));
  auto margin = test::read_f64(ref_file(name), "greedy_margin");
  Session s(*model);
  const std::vector<float>* lg = &s.feed(prompt);
  int checked = 0;
  for (size_t i = 0; i < greedy.size(); ++i) {
    if (margin[i] > kGreedyMargin) {
      EXPECT_EQ(argmax(lg->data(), int64_t(lg->size())), greedy[i]) << name << " greedy step " << i;
      ++checked;
    }
    lg = &s.feed({greedy[i]});
  }
  EXPECT_GT(checked, 0);
}

// Free-running greedy generation equals the reference up to the first step
// whose margin is too small to decide.
TEST_P(Golden, GreedyGeneration) {
  const std::string name = GetParam();
  auto model = load_model(model_dir(name), test::on_test_device());
  auto prompt = ids_of(test::read_i64(ref_file(name), "greedy_prompt"));
  auto greedy = ids_of(test::read_i64(ref_file(name), "greedy_ids"));
  auto margin = test::read_f64(ref_file(name), "greedy_margin");
  Session s(*model);
  auto out = generate_greedy(s, prompt, int64_t(greedy.size()), /*ignore_eos=*/true);
  ASSERT_EQ(out.size(), greedy.size());
  for (size_t i = 0; i < greedy.size() && margin[i] > kGreedyMargin; ++i) EXPECT_EQ(out[i], greedy[i]) << "step " << i;
}

std::vector<std::string> case_names() {
  std::vector<std::string> v;
  for (const auto& c : kCases) v.push_back(c.name);
  return v;
}
INSTANTIATE_TEST_SUITE_P(Models, Golden, ::testing::ValuesIn(case_names()));

// The fixtures that exist to exercise a saturating nonlinearity must keep doing
// so: their generators count, in float64, the activations beyond the limit.
TEST(GoldenFixtures, GptOssSwigluClampFires) {
  const std::string ref = ref_file("gpt_oss_clamp");
  const double hits = test::read_f64(ref, "clamp_hits")[0], total = test::read_f64(ref, "clamp_total")[0];
  std::printf("[golden] gpt_oss_clamp: %.0f of %.0f routed gate/up activations beyond swiglu_limit\n", hits, total);
  EXPECT_GT(hits, 0.05 * total);
}

TEST(GoldenFixtures, KimiK3SituSaturates) {
  const std::string ref = ref_file("kimi_k3_situ");
  const double hits = test::read_f64(ref, "situ_saturated")[0], total = test::read_f64(ref, "situ_total")[0];
  std::printf("[golden] kimi_k3_situ: %.0f of %.0f SiTU up-branch inputs with |u| > activation_situ_linear_beta\n", hits,
              total);
  EXPECT_GT(hits, 0.05 * total);
}

TEST(GoldenFixtures, LongSequencesAreLong) {
  for (const char* name : {"kimi_linear_long", "kimi_k3_long"})
    EXPECT_GE(test::read_i64(ref_file(name), "input_ids").size(), 300u) << name;
}

// The CLI contract: `sluice logits` writes [T, vocab] F32 logits matching the reference.
TEST(GoldenCli, LogitsCommandWritesReferenceLogits) {
  test::TempDir tmp;
  const std::string name = "deepseek_v3_tiny_fp8";
  auto ids = test::read_i64(ref_file(name), "input_ids");
  std::string list;
  for (size_t i = 0; i < ids.size(); ++i) list += (i ? "," : "") + std::to_string(ids[i]);
  for (const std::string& k : std::vector<std::string>{"0", "1", std::to_string(ids.size() / 2)}) {
    std::vector<std::string> args = {"logits", "--model", model_dir(name), "--tokens", list, "--output", tmp.file("l.st")};
    if (k != "0") args.insert(args.end(), {"--decode-from", k});
    auto r = test::run_sluice(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<int64_t> shape;
    auto mine = test::read_f64(tmp.file("l.st"), "logits", &shape);
    ASSERT_EQ(shape, (std::vector<int64_t>{int64_t(ids.size()), 1024}));
    EXPECT_LE(test::max_row_rel_error(mine, test::read_f64(ref_file(name), "logits"), 1024), golden(name).tol) << "decode from " << k;
  }
}

TEST(GoldenCli, GenerateCommandPrintsGreedyIds) {
  const std::string name = "qwen3_moe_tiny";
  auto prompt = test::read_i64(ref_file(name), "greedy_prompt");
  auto greedy = test::read_i64(ref_file(name), "greedy_ids");
  auto margin = test::read_f64(ref_file(name), "greedy_margin");
  std::string list;
  for (size_t i = 0; i < prompt.size(); ++i) list += (i ? "," : "") + std::to_string(prompt[i]);
  auto r = test::run_sluice({"generate", "--model", model_dir(name), "--tokens", list, "--max-new", "16", "--ignore-eos"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string want = "[";
  size_t clear = 0;
  while (clear < greedy.size() && margin[clear] > kGreedyMargin) ++clear;
  ASSERT_GT(clear, 0u);
  for (size_t i = 0; i < clear; ++i) want += (i ? "," : "") + std::to_string(greedy[i]);
  EXPECT_EQ(r.out.substr(0, want.size()), want);
}

}  // namespace
}  // namespace sluice::golden_test
