// Configurations other than the goldens' (other widths, expert counts, group
// settings, layer schedules, weight formats), written by `sluice synth`:
// cached decoding equals a full pass, and streaming equals all-in-RAM.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "runtime/session.h"
#include "store/synthetic.h"
#include "support/test_support.h"

namespace sluice::synthetic_configs_test {
namespace {

struct Variant {
  const char* label;
  SynthOptions opts;
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  auto add = [&](const char* label, const char* arch, auto tweak) {
    SynthOptions o;
    o.arch = arch;
    o.progress = false;
    tweak(o);
    v.push_back({label, o});
  };
  add("deepseek_v3 48 experts top-6 fp8", "deepseek_v3", [](SynthOptions& o) {
    o.experts = 48, o.top_k = 6, o.layers = 3, o.expert_format = "fp8";
  });
  add("kimi_k2 int4 hidden 320", "kimi_k2", [](SynthOptions& o) { o.hidden = 320, o.expert_format = "int4"; });
  add("qwen3_moe 24 experts", "qwen3_moe", [](SynthOptions& o) { o.experts = 24, o.layers = 2, o.top_k = 2; });
  add("kimi_k3 9 layers 40 experts", "kimi_k3", [](SynthOptions& o) { o.layers = 9, o.experts = 40, o.top_k = 6; });
  add("kimi_k3 2 layers", "kimi_k3", [](SynthOptions& o) { o.layers = 2; });
  return v;
}

TEST(SyntheticConfigs, DecodeEqualsFullPassAndStreamingEqualsResident) {
  for (auto& v : variants()) {
    test::TempDir tmp;
    v.opts.out_dir = tmp.file("m");
    synthesize(v.opts);
    auto m = load_model(v.opts.out_dir);
    std::vector<int32_t> ids;
    for (int i = 0; i < 20; ++i) ids.push_back(3 + (i * 131) % 1000);
    Session full(*m);
    full.set_prefill_chunk(0);
    auto all = full.feed_all(ids);
    Session step(*m);
    std::vector<float> dec = step.feed_all({ids[0]});
    for (size_t t = 1; t < ids.size(); ++t) {
      auto l = step.feed_all({ids[t]});
      dec.insert(dec.end(), l.begin(), l.end());
    }
    std::vector<double> a(all.begin(), all.end()), b(dec.begin(), dec.end());
    for (double x : a) ASSERT_TRUE(std::isfinite(x)) << v.label;
    EXPECT_LE(test::max_row_rel_error(b, a, m->info().vocab), 1e-4) << v.label;
    LoadOptions lo;
    lo.stream_experts = true;
    lo.streaming.cache_bytes = 2u << 20;
    auto ms = load_model(v.opts.out_dir, lo);
    Session s(*ms);
    EXPECT_EQ(s.feed_all(ids), Session(*m).feed_all(ids)) << v.label;
  }
}

}  // namespace
}  // namespace sluice::synthetic_configs_test
