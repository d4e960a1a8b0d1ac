// K3's own drafters, DSpark and EAGLE-3.1 (model/dspark.h, model/eagle3.h,
// runtime/hidden_state_drafter.h): the loaders name what is wrong; with
// random-weight drafters of the published layouts, speculative decoding on
// K3-shaped models is token-identical to plain decoding, greedy and sampled;
// and a drafter's state follows the target's rollbacks.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <tuple>

#include "engine/drafter.h"
#include "engine/engine.h"
#include "format/safetensors.h"
#include "model/decoder.h"
#include "model/dspark.h"
#include "model/eagle3.h"
#include "runtime/hidden_state_drafter.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "store/synthetic_dspark.h"
#include "store/synthetic_eagle3.h"
#include "support/plain_decoding.h"
#include "support/test_device.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::hidden_state_drafters_test {
namespace {

std::string model_dir(const std::string& name) {
  return name == "sluice-k3-mini" ? test::fixture("../../models/sluice-k3-mini") : test::fixture("golden/" + name);
}

std::vector<int32_t> prompt_of(const Model& m, int64_t n) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(int32_t((7 + 37 * i) % m.info().vocab));
  return p;
}

// A random-weight drafter of `kind` (dspark or eagle3) matched to `target`, written under `tmp`.
std::string synth_drafter(const test::TempDir& tmp, const Model& target, const std::string& kind = "dspark",
                          uint64_t seed = 1) {
  const ModelInfo& t = target.info();
  const std::string dir = tmp.file(kind);
  if (kind == "eagle3") {
    Eagle3SynthOptions o = eagle3_synth_for_target(t.hidden, t.vocab, t.n_layers);
    o.out_dir = dir;
    o.seed = seed;
    synthesize_eagle3(o);
  } else {
    DSparkSynthOptions o = dspark_synth_for_target(t.hidden, t.vocab, t.n_layers);
    o.out_dir = dir;
    o.seed = seed;
    synthesize_dspark(o);
  }
  return dir;
}

std::shared_ptr<Drafter> open_drafter(const std::string& dir, const Engine& target) {
  DraftChoice c;
  c.model_dir = dir;
  return choose_drafter(c, target);
}

// A copy of the drafter's model.safetensors with one tensor left out or given another shape.
void rewrite_without(const std::string& dir, const std::string& name, std::vector<int64_t> new_shape = {}) {
  const std::string path = dir + "/model.safetensors";
  std::vector<TensorData> out;
  {
    SafetensorsFile f(path);
    for (const auto& [n, info] : f.tensors()) {
      const TensorView v = f.get(n);
      TensorData t{n, v.dtype(), v.shape(), std::vector<uint8_t>(v.data, v.data + v.nbytes())};
      if (n == name) {
        if (new_shape.empty()) continue;
        int64_t numel = 1;
        for (int64_t d : new_shape) numel *= d;
        t.shape = new_shape;
        t.bytes.assign(size_t(numel) * 2, 0);
      }
      out.push_back(std::move(t));
    }
  }
  write_safetensors(path, out);
}

TEST(DSparkLoader, ErrorsNameTheFileAndTheTensor) {
  auto model = load_model(test::fixture("golden/kimi_k3_tiny"), test::on_test_device());
  {
    test::TempDir tmp;
    const std::string dir = synth_drafter(tmp, *model);
    rewrite_without(dir, "layers.3.self_attn.kv_b_proj.weight");
    const std::string e = test::error_of([&] { open_drafter(dir, *model); });
    EXPECT_NE(e.find("layers.3.self_attn.kv_b_proj"), std::string::npos) << e;
    EXPECT_NE(e.find(dir), std::string::npos) << e;
  }
  {
    test::TempDir tmp;
    const std::string dir = synth_drafter(tmp, *model);
    rewrite_without(dir, "markov_head.markov_w2.weight", {1024, 8});
    const std::string e = test::error_of([&] { open_drafter(dir, *model); });
    EXPECT_NE(e.find("markov_head.markov_w2.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  }
  {
    test::TempDir tmp;
    const std::string dir = synth_drafter(tmp, *model);
    rewrite_without(dir, "context_proj.weight", {256, 256 * 4});  // 4 target layers' width, not 5
    const std::string e = test::error_of([&] { open_drafter(dir, *model); });
    EXPECT_NE(e.find("context_proj.weight"), std::string::npos) << e;
  }
  {
    // A drafter made for another target is refused before its weights are read.
    test::TempDir tmp;
    DSparkSynthOptions o = dspark_synth_for_target(256, 1024, 93);
    o.out_dir = tmp.file("dspark");
    synthesize_dspark(o);
    const std::string e = test::error_of([&] { open_drafter(o.out_dir, *model); });
    EXPECT_NE(e.find("target layer 23"), std::string::npos) << e;
  }
}

TEST(DSparkLoader, ReadsThePublishedRoster) {
  auto model = load_model(test::fixture("golden/kimi_k3_tiny"), test::on_test_device());
  test::TempDir tmp;
  const std::string dir = synth_drafter(tmp, *model);
  EXPECT_EQ(SafetensorsFile(dir + "/model.safetensors").tensors().size(), 68u);
  auto d = open_drafter(dir, *model);
  auto* hs = dynamic_cast<HiddenStateDrafter*>(d.get());
  ASSERT_NE(hs, nullptr);
  auto* ds = dynamic_cast<const DSparkModel*>(&hs->model());
  ASSERT_NE(ds, nullptr) << "a k3_dspark config is detected as a DSpark drafter";
  EXPECT_EQ(hs->target_layers(), (std::vector<int64_t>{0, 1, 3, 5, 6}));  // [2,23,47,71,89] of 93, of 7
  EXPECT_EQ(ds->config().mask_token, 1021);
  // Blocks of at most 7 drafts, whatever is asked.
  Session s(*model);
  capture_for_drafter(s, d.get());
  s.feed(prompt_of(*model, 5));
  std::vector<int32_t> h = s.tokens();
  h.push_back(4);
  EXPECT_EQ(d->propose_for(s, h, 10).size(), 7u);
  h.push_back(8);
  EXPECT_TRUE(d->propose_for(s, h, 3).empty()) << "a history that is not the session's and one chosen token";
}

// (target model, drafter kind)
class HiddenDraftSpeculation : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  std::string target() const { return std::get<0>(GetParam()); }
  std::string kind() const { return std::get<1>(GetParam()); }
};

TEST_P(HiddenDraftSpeculation, GreedyTokenIdenticalToPlainDecoding) {
  auto model = load_model(model_dir(target()), test::on_test_device());
  test::TempDir tmp;
  auto drafter = open_drafter(synth_drafter(tmp, *model, kind()), *model);
  const auto prompt = prompt_of(*model, 12);
  const int64_t n = 40;
  Session plain(*model);
  const auto want = generate_greedy(plain, prompt, n, /*ignore_eos=*/true);
  for (int64_t max_draft : {1, 3, 7}) {
    SpeculationOptions so;
    so.max_draft = max_draft;
    so.adaptive = false;  // draft at every step, whether or not it pays
    Session s(*model);
    SpeculationStats st;
    EXPECT_EQ(generate_speculative(s, prompt, n, true, *drafter, so, &st), want) << "draft " << max_draft;
    EXPECT_GT(st.proposed, n / 2) << "the drafter drafted";
    EXPECT_EQ(st.generated, n);
    EXPECT_EQ(s.tokens(), plain.tokens());
  }
}

TEST_P(HiddenDraftSpeculation, SampledTokenIdenticalToPlainSampling) {
  auto model = load_model(model_dir(target()), test::on_test_device());
  const int64_t V = model->info().vocab;
  test::TempDir tmp;
  auto drafter = open_drafter(synth_drafter(tmp, *model, kind(), 3), *model);
  const auto prompt = prompt_of(*model, 9);
  const int64_t n = 32;
  SamplingParams settings[2];
  settings[0].temperature = 1.0, settings[0].seed = 11;
  settings[1].temperature = 0.5, settings[1].top_p = 0.9, settings[1].seed = 5;
  for (const SamplingParams& p : settings) {
    Session plain(*model);
    const auto want = test::sample_plainly(plain, prompt, n, p);
    Sampler sampler(p);
    auto pick = [&](float* logits) { return sampler.sample(logits, V).token; };
    SpeculationOptions so;
    so.max_draft = 5;
    so.adaptive = false;
    Session s(*model);
    SpeculationStats st;
    EXPECT_EQ(generate(s, prompt, n, true, pick, drafter.get(), so, &st), want) << "temperature " << p.temperature;
    EXPECT_GT(st.proposed, 0);
    // The state after speculation is the plain one: the same next logits.
    EXPECT_EQ(s.feed({want.back()}), plain.feed({want.back()}));
  }
}

// After decoding with rejected drafts and rollbacks, the drafter's context is
// what a fresh drafter builds from the same text fed plainly: its next draft
// is the same.
TEST_P(HiddenDraftSpeculation, ContextFollowsRollbacks) {
  auto model = load_model(model_dir(target()), test::on_test_device());
  test::TempDir tmp;
  const std::string dir = synth_drafter(tmp, *model, kind(), 5);
  auto a = open_drafter(dir, *model), b = open_drafter(dir, *model);
  const auto prompt = prompt_of(*model, 10);
  SpeculationOptions so;
  so.max_draft = 4;
  so.adaptive = false;
  Session s(*model);
  SpeculationStats st;
  const auto out = generate_speculative(s, prompt, 20, true, *a, so, &st);
  ASSERT_LT(st.accepted, st.proposed) << "some drafts were rejected (rolled back)";
  std::vector<int32_t> history = s.tokens();
  history.push_back(out.back());
  Session t(*model);
  capture_for_drafter(t, b.get());
  t.feed(s.tokens());
  const auto da = a->propose_for(s, history, 6), db = b->propose_for(t, history, 6);
  EXPECT_EQ(da.size(), 6u);
  EXPECT_EQ(da, db);
  EXPECT_EQ(dynamic_cast<HiddenStateDrafter&>(*a).positions(s), s.position());
  // A new conversation with the same drafter starts its context over.
  Session u(*model);
  capture_for_drafter(u, a.get());
  u.feed(prompt);
  std::vector<int32_t> h2 = prompt;
  h2.push_back(3);
  Session v(*model);
  capture_for_drafter(v, b.get());
  v.feed(prompt);
  EXPECT_EQ(a->propose_for(u, h2, 4), b->propose_for(v, h2, 4));
  // Without the capture (set after the prompt) there is nothing to draft from.
  Session w(*model);
  w.feed(prompt);
  w.capture_hidden(a->target_layers());
  EXPECT_TRUE(a->propose_for(w, h2, 4).empty());
}

// The target goes back into rows the drafter already took (a conversation
// rolled back to a mark and continued otherwise): the drafter drops what it
// built from them and drafts as a fresh one would on the new text.
TEST_P(HiddenDraftSpeculation, FollowsARollbackIntoRowsItTook) {
  auto model = load_model(model_dir(target()), test::on_test_device());
  test::TempDir tmp;
  const std::string dir = synth_drafter(tmp, *model, kind(), 7);
  auto a = open_drafter(dir, *model), b = open_drafter(dir, *model);
  const auto prompt = prompt_of(*model, 12);
  Session s(*model);
  capture_for_drafter(s, a.get());
  s.feed(std::vector<int32_t>(prompt.begin(), prompt.begin() + 6));
  s.checkpoint();
  s.feed(std::vector<int32_t>(prompt.begin() + 6, prompt.end()));
  std::vector<int32_t> h1 = s.tokens();
  h1.push_back(3);
  ASSERT_FALSE(a->propose_for(s, h1, 4).empty());  // rows of all 12 positions taken
  s.rollback(2);                                   // back to 8 positions
  s.feed({5, 6, 7});
  std::vector<int32_t> h2 = s.tokens();
  h2.push_back(9);
  Session t(*model);
  capture_for_drafter(t, b.get());
  t.feed(s.tokens());
  const auto da = a->propose_for(s, h2, 5), db = b->propose_for(t, h2, 5);
  EXPECT_EQ(da.size(), 5u);
  EXPECT_EQ(da, db);
}

// Sequences served in turn each keep their state, up to the number asked
// for; the least recently served goes first and drafts nothing once back.
TEST(HiddenStateDrafter, KeepsTheLastSequencesItServed) {
  auto model = load_model(test::fixture("golden/kimi_k3_tiny"), test::on_test_device());
  test::TempDir tmp;
  const std::string dir = synth_drafter(tmp, *model);
  const Decoder& d = model->decoder();
  HiddenStateDrafter drafter(std::make_unique<DSparkModel>(dir, model->backend(), d.embedding(), d.head()),
                             /*sequences=*/2);
  std::vector<std::unique_ptr<Session>> s;
  std::vector<std::vector<int32_t>> h;
  for (int i = 0; i < 3; ++i) {
    s.push_back(std::make_unique<Session>(*model));
    capture_for_drafter(*s.back(), &drafter);
    s.back()->feed(prompt_of(*model, 6 + i));
    h.push_back(s.back()->tokens());
    h.back().push_back(int32_t(11 + i));
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(drafter.propose_for(*s[size_t(i)], h[size_t(i)], 3).size(), 3u) << i;
  EXPECT_EQ(drafter.positions(*s[0]), -1) << "the first sequence made room for the third";
  EXPECT_EQ(drafter.positions(*s[1]), 7);
  // The second goes on (two more positions fed), the first has lost its rows.
  s[1]->feed({h[1].back(), 5});
  h[1] = s[1]->tokens();
  h[1].push_back(2);
  EXPECT_EQ(drafter.propose_for(*s[1], h[1], 3).size(), 3u);
  EXPECT_EQ(drafter.positions(*s[1]), 9);
  EXPECT_TRUE(drafter.propose_for(*s[0], h[0], 3).empty());
}

INSTANTIATE_TEST_SUITE_P(K3Models, HiddenDraftSpeculation,
                         ::testing::Combine(::testing::Values("kimi_k3_tiny", "sluice-k3-mini"),
                                            ::testing::Values("dspark", "eagle3")),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param);
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(Eagle3Loader, ErrorsNameTheFileAndTheTensor) {
  auto model = load_model(test::fixture("golden/kimi_k3_tiny"), test::on_test_device());
  {
    test::TempDir tmp;
    const std::string dir = synth_drafter(tmp, *model, "eagle3");
    rewrite_without(dir, "layers.0.hidden_norm.weight");
    const std::string e = test::error_of([&] { open_drafter(dir, *model); });
    EXPECT_NE(e.find("layers.0.hidden_norm.weight"), std::string::npos) << e;
    EXPECT_NE(e.find(dir), std::string::npos) << e;
  }
  {
    // q_a_proj reads [embedding, fused hidden]: twice the hidden size.
    test::TempDir tmp;
    const std::string dir = synth_drafter(tmp, *model, "eagle3");
    rewrite_without(dir, "layers.0.self_attn.q_a_proj.weight", {64, 256});
    const std::string e = test::error_of([&] { open_drafter(dir, *model); });
    EXPECT_NE(e.find("layers.0.self_attn.q_a_proj.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  }
  {
    test::TempDir tmp;
    const std::string dir = synth_drafter(tmp, *model, "eagle3");
    rewrite_without(dir, "fc_norm.1.weight");
    const std::string e = test::error_of([&] { open_drafter(dir, *model); });
    EXPECT_NE(e.find("fc_norm.1.weight"), std::string::npos) << e;
  }
}

TEST(Eagle3Loader, ReadsTheLayoutAndTheTaps) {
  auto model = load_model(test::fixture("golden/kimi_k3_tiny"), test::on_test_device());
  test::TempDir tmp;
  const std::string dir = synth_drafter(tmp, *model, "eagle3");
  auto d = open_drafter(dir, *model);
  auto* hs = dynamic_cast<HiddenStateDrafter*>(d.get());
  ASSERT_NE(hs, nullptr);
  ASSERT_NE(dynamic_cast<const Eagle3Model*>(&hs->model()), nullptr) << "an Eagle3 config is detected";
  // K3's outputs of layers 1/45/89 of 93, of 7 layers; the config holds them as aux ids (inputs of the next).
  EXPECT_EQ(hs->target_layers(), (std::vector<int64_t>{0, 3, 6}));
}

// A reduced draft vocabulary: drafts are mapped through d2t into the
// target's ids, and decoding is still the plain output.
TEST(Eagle3Drafts, ReducedVocabularyMapsIntoTargetIds) {
  auto model = load_model(test::fixture("golden/kimi_k3_tiny"), test::on_test_device());
  test::TempDir tmp;
  Eagle3SynthOptions o = eagle3_synth_for_target(model->info().hidden, model->info().vocab, model->info().n_layers);
  o.draft_vocab = model->info().vocab / 4;
  o.out_dir = tmp.file("eagle3");
  synthesize_eagle3(o);
  auto d = open_drafter(o.out_dir, *model);
  const auto prompt = prompt_of(*model, 10);
  Session plain(*model);
  const auto want = generate_greedy(plain, prompt, 24, true);
  SpeculationOptions so;
  so.max_draft = 4;
  so.adaptive = false;
  Session s(*model);
  SpeculationStats st;
  EXPECT_EQ(generate_speculative(s, prompt, 24, true, *d, so, &st), want);
  EXPECT_GT(st.proposed, 0);
  std::vector<int32_t> history = s.tokens();
  history.push_back(want.back());
  for (int32_t t : d->propose_for(s, history, 6)) EXPECT_EQ(t % 4, 0) << "draft id * 4 is the target id";
}

}  // namespace
}  // namespace sluice::hidden_state_drafters_test
