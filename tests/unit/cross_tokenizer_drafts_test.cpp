// Drafts across tokenizers (runtime/retokenizing_drafter.h): the boundary
// handling between two tokenizers' ids, and output identical to plain
// decoding, greedy and sampled, in both directions between the shipped model
// (byte-level BPE, tokenizer.json) and a golden model without tokenizer files
// (ids 0-255 are bytes).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/drafter.h"
#include "engine/engine.h"
#include "runtime/model_drafter.h"
#include "runtime/retokenizing_drafter.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "support/plain_decoding.h"
#include "support/test_device.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::cross_tokenizer_drafts_test {
namespace {

using retokenize::target_ids;

const std::string kShipped = "../../models/sluice-k3-mini";
const std::string kBytes = "golden/qwen3_moe_tiny";  // no tokenizer files, 1024 ids

std::shared_ptr<const TokenText> shipped_text() {
  static auto t = model_token_text(test::fixture(kShipped), 4096);
  return t;
}

std::string bytes_of(const TokenText& t, const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += t.bytes(id);
  return s;
}

TEST(Retokenize, Utf8Boundaries) {
  const std::string ja = "日本";  // E6 97 A5 E6 9C AC
  EXPECT_EQ(retokenize::complete_prefix(ja), 6u);
  EXPECT_EQ(retokenize::complete_prefix(ja.substr(0, 5)), 3u);
  EXPECT_EQ(retokenize::unfinished_tail(ja.substr(0, 5)), 2u);
  EXPECT_EQ(retokenize::unfinished_tail(ja.substr(0, 4)), 1u);
  EXPECT_EQ(retokenize::unfinished_tail(ja), 0u);
  EXPECT_EQ(retokenize::unfinished_tail("ab\x97"), 0u);      // a stray continuation byte is not held
  EXPECT_EQ(retokenize::unfinished_tail("ab\xE0\x80"), 0u);  // E0 80 can never be finished (overlong)
  EXPECT_EQ(retokenize::complete_prefix("ok\xC0\xAF!"), 2u);
  EXPECT_EQ(retokenize::complete_prefix("\xED\xA0\x80"), 0u);  // a surrogate
  // The settled prefix ends before the last word and the whitespace before it.
  const std::string t = "Hello big  world";
  EXPECT_EQ(retokenize::settle_point(t, 0, t.size()), 9u);
  EXPECT_EQ(retokenize::settle_point(t, 10, t.size()), 10u);
  EXPECT_EQ(retokenize::settle_point("nospace", 0, 7), 0u);
  // A long stretch without whitespace is settled 32 bytes back, on a character boundary.
  std::string kana;
  for (int i = 0; i < 30; ++i) kana += "あ";  // 90 bytes
  const size_t p = retokenize::settle_point(kana, 0, kana.size());
  EXPECT_GE(p, kana.size() - 34);
  EXPECT_LE(p, kana.size() - 32);
  EXPECT_EQ(p % 3, 0u);
}

// The target's ids for a draft's text: an unfinished last word and an
// unfinished last character are left out; the rest writes the text exactly.
TEST(Retokenize, TargetIdsLeaveOutWhatMayStillMerge) {
  const TokenText& bpe = *shipped_text();
  const std::string p = " and the earth was without form";
  auto ids = target_ids(bpe, "", p, 100, 4096);
  const std::vector<int32_t> all = bpe.encode(p);
  ASSERT_GE(all.size(), 3u);
  EXPECT_EQ(ids, std::vector<int32_t>(all.begin(), all.end() - 1));  // the last may merge further
  EXPECT_EQ(bytes_of(bpe, ids) + bpe.bytes(all.back()), p);
  EXPECT_EQ(target_ids(bpe, "", p, 2, 4096), std::vector<int32_t>(all.begin(), all.begin() + 2));
  // Ids at or past the target's vocabulary end the draft.
  EXPECT_TRUE(target_ids(bpe, "", p, 100, all[0]).empty());
  // A character cut short at the end is not drafted, nor the last token before it.
  const std::string cut = std::string(" light and 日本語") + "\xE6\x97";
  const auto c = target_ids(bpe, "", cut, 100, 4096);
  const std::string cb = bytes_of(bpe, c);
  EXPECT_EQ(cut.rfind(cb, 0), 0u);
  EXPECT_GT(cb.size(), 0u);
  EXPECT_LT(cb.size(), retokenize::complete_prefix(cut));
  EXPECT_EQ(bytes_of(bpe, bpe.encode(cut.substr(0, retokenize::complete_prefix(cut)))).rfind(cb, 0), 0u);
  // An added token is whole: it is drafted even at the end.
  const auto end = target_ids(bpe, "", " light<|im_end|>", 100, 4096);
  ASSERT_FALSE(end.empty());
  EXPECT_TRUE(bpe.is_added(end.back()));
  EXPECT_EQ(bytes_of(bpe, end), " light<|im_end|>");
  // One id per byte: everything is drafted, an unfinished character included.
  const ByteTokenText bytes;
  EXPECT_EQ(bytes_of(bytes, target_ids(bytes, "", cut, 100, 1024)), cut);
  EXPECT_EQ(target_ids(bytes, "", cut, 3, 1024).size(), 3u);
}

// The target's text ends inside a character (a byte-level token): the draft,
// which saw the text before it, must begin with the held bytes; the rest of
// the character becomes the target's ids for those bytes.
TEST(Retokenize, TargetIdsFinishTheCharacterTheTextEndsInside) {
  const TokenText& bpe = *shipped_text();
  const std::string held = "\xE6";  // the first byte of 日 (E6 97 A5)
  const std::string p = "日本語 and more words";
  const auto ids = target_ids(bpe, held, p, 100, 4096);
  ASSERT_FALSE(ids.empty());
  const std::string b = bytes_of(bpe, ids);
  EXPECT_EQ(b.substr(0, 2), "\x97\xA5");                 // the character finished first
  EXPECT_EQ((held + b), p.substr(0, held.size() + b.size()));  // then the text, as far as it goes
  EXPECT_GT(b.size(), 2u);
  EXPECT_TRUE(target_ids(bpe, held, "語", 100, 4096).empty());            // another character: no draft
  EXPECT_EQ(bytes_of(bpe, target_ids(bpe, held, "本語 and", 100, 4096)).substr(0, 2), "\x9C\xAC");  // 本, E6 9C AC
  EXPECT_TRUE(target_ids(bpe, held, "\xE6" "A and", 100, 4096).empty());  // not finished: no draft
  const ByteTokenText bytes;
  EXPECT_EQ(target_ids(bytes, "\xE6\x97", p, 2, 1024), (std::vector<int32_t>{0xA5, 0xE6}));
}

// Records what the inner drafter is given and proposes a fixed text in its ids.
class TextDrafter : public Drafter {
 public:
  TextDrafter(std::shared_ptr<const TokenText> t, std::string say) : t_(std::move(t)), say_(std::move(say)) {}
  std::vector<int32_t> propose(const std::vector<int32_t>& h, int64_t max) override {
    return propose_after(h, h.size(), max);
  }
  std::vector<int32_t> propose_after(const std::vector<int32_t>& h, size_t settled, int64_t max) override {
    history = h;
    this->settled = settled;
    std::vector<int32_t> ids = t_->encode(say_);
    if (int64_t(ids.size()) > max) ids.resize(size_t(max));
    return ids;
  }
  std::vector<int32_t> history;
  size_t settled = 0;

 private:
  std::shared_ptr<const TokenText> t_;
  std::string say_;
};

// The draft's ids follow the target's text: settled ids stay while the text
// grows (only the last word is tokenised again), a word the target finishes
// is tokenised whole, and a departing history drops what it changed.
TEST(RetokenizingDrafter, DraftIdsFollowTheTargetsText) {
  for (bool bpe_target : {true, false}) {
    const auto bpe = shipped_text();
    const auto bytes = std::make_shared<ByteTokenText>();
    const auto target = bpe_target ? bpe : std::shared_ptr<const TokenText>(bytes);
    const auto draft = bpe_target ? std::shared_ptr<const TokenText>(bytes) : bpe;
    auto inner = std::make_unique<TextDrafter>(draft, "lo world, and");
    TextDrafter* in = inner.get();
    RetokenizingDrafter d(target, draft, std::move(inner), bpe_target ? 4096 : 1024);
    const std::string text = "In the beginning God created the heaven and the earth. 天地 And the hel";
    const std::vector<int32_t> all = target->encode(text);
    std::vector<int32_t> prev_settled;
    for (size_t n = 1; n <= all.size(); ++n) {
      const std::vector<int32_t> h(all.begin(), all.begin() + std::ptrdiff_t(n));
      const auto got = d.propose(h, 8);
      const std::string t = bytes_of(*target, h);
      EXPECT_EQ(d.text(), t);
      // The inner drafter saw the text's whole characters in its own ids, the settled ones first.
      const std::string seen = bytes_of(*draft, in->history);
      EXPECT_EQ(seen, t.substr(0, t.size() - retokenize::unfinished_tail(t))) << n;
      EXPECT_EQ(in->settled, d.settled_ids().size());
      EXPECT_TRUE(std::equal(prev_settled.begin(), prev_settled.end(), d.settled_ids().begin()))
          << "settled ids changed while the text only grew, at " << n;
      prev_settled = d.settled_ids();
      // The target's draft writes the start of what the inner drafter said, after the text.
      if (!got.empty()) {
        EXPECT_EQ(std::string("lo world, and").rfind(bytes_of(*target, got), 0), 0u) << n;
      }
      EXPECT_GE(d.last_ask(), 2);
    }
    // "hel" + "lo": the draft ids are the target's ids for "lo" and " world" (" and" may merge further).
    const auto got = d.propose(all, 8);
    EXPECT_EQ(bytes_of(*target, got), bpe_target ? "lo world," : "lo world");  // bytes: 8 at most
    // The target finishes the word: the draft tokenizer reads it whole.
    std::vector<int32_t> more = all;
    for (int32_t id : target->encode("lo")) more.push_back(id);
    d.propose(more, 8);
    if (!bpe_target) {
      const std::vector<int32_t> hello = bpe->encode(" hello");
      EXPECT_TRUE(std::equal(hello.rbegin(), hello.rend(), in->history.rbegin())) << "not tokenised whole";
    }
    // A history that departs from the last one keeps only the settled ids before the change.
    std::vector<int32_t> other(all.begin(), all.begin() + 3);
    for (int32_t id : target->encode(" something else")) other.push_back(id);
    d.propose(other, 8);
    EXPECT_EQ(bytes_of(*draft, in->history), bytes_of(*target, other));
  }
}

// Proposes what follows the history's text in a known text, in the draft's
// ids: right drafts across tokenizers (as a good draft model would make).
class KnownTextDrafter : public Drafter {
 public:
  KnownTextDrafter(std::shared_ptr<const TokenText> t, std::string truth) : t_(std::move(t)), truth_(std::move(truth)) {}
  std::vector<int32_t> propose(const std::vector<int32_t>& h, int64_t max) override {
    std::string seen;
    for (int32_t id : h) seen += t_->bytes(id);
    if (truth_.rfind(seen, 0) != 0) return {};
    const std::string next = truth_.substr(seen.size(), size_t(max) * 8);
    std::vector<int32_t> ids = t_->encode(next.substr(0, retokenize::complete_prefix(next)));
    if (int64_t(ids.size()) > max) ids.resize(size_t(max));
    return ids;
  }

 private:
  std::shared_ptr<const TokenText> t_;
  std::string truth_;
};

std::vector<int32_t> decode_with(Session& s, const std::vector<int32_t>& prompt, int64_t n, const SamplingParams& p,
                                 Drafter& d, SpeculationStats* st, int64_t max_draft = 8) {
  Sampler sampler(p);
  const int64_t V = s.model().info().vocab;
  auto pick = [&](float* logits) { return sampler.sample(logits, V).token; };
  SpeculationOptions always;  // draft at every step: the gate would stop drafts that do not pay
  always.adaptive = false;
  always.max_draft = max_draft;
  return generate(s, prompt, n, /*ignore_eos=*/true, pick, &d, always, st);
}

const char* const kPrompts[] = {
    "And God said, Let there be light: and there was light. And God saw the light, that it was good",
    "Grüße aus Köln — 日本語のテキスト ✓ and God said, Let there be",
};

struct Direction {
  std::string target, draft;
};
const Direction kDirections[] = {{kShipped, kBytes}, {kBytes, kShipped}};

// The draft model with another tokenizer (chosen as --draft-model chooses it)
// leaves greedy and sampled output as it is, in both directions.
TEST(CrossTokenizerDrafts, OutputIsThePlainOutputBothWays) {
  for (const auto& dir : kDirections) {
    auto target = load_model(test::fixture(dir.target), test::on_test_device());
    DraftChoice c;
    c.model_dir = test::fixture(dir.draft);
    auto d = choose_drafter(c, *target, test::fixture(dir.target));
    ASSERT_NE(dynamic_cast<RetokenizingDrafter*>(d.get()), nullptr) << dir.target << " <- " << dir.draft;
    const auto tt = model_token_text(test::fixture(dir.target), target->info().vocab);
    for (const char* text : kPrompts) {
      const std::vector<int32_t> prompt = tt->encode(text);
      const int64_t n = 24;
      for (double temp : {0.0, 0.8}) {
        SamplingParams p;
        p.temperature = temp, p.seed = 3;
        Session plain(*target), spec(*target);
        SpeculationStats st;
        const auto want = test::sample_plainly(plain, prompt, n, p);
        EXPECT_EQ(decode_with(spec, prompt, n, p, *d, &st), want)
            << dir.target << " <- " << dir.draft << ", temperature " << temp << ": " << text;
        EXPECT_GT(st.proposed, 0) << dir.target << " <- " << dir.draft << ": " << text;
      }
    }
  }
}

// Right drafts in the other tokenizer's ids are accepted: the text of the
// plain output, tokenised by the draft's tokenizer, drafts for the shipped
// model; greedy and sampled, both directions of the text conversion (the
// byte-level model's random output is no text to replay, so the shipped
// model's text is replayed through either tokenizer).
TEST(CrossTokenizerDrafts, RightDraftsInAnotherTokenizerAreAccepted) {
  auto target = load_model(test::fixture(kShipped), test::on_test_device());
  const auto bpe = shipped_text();
  const auto bytes = std::make_shared<ByteTokenText>();
  for (const char* text : kPrompts) {
    const std::vector<int32_t> prompt = bpe->encode(text);
    const int64_t n = 32;
    for (double temp : {0.0, 0.8}) {
      SamplingParams p;
      p.temperature = temp, p.seed = 11;
      Session plain(*target);
      const auto want = test::sample_plainly(plain, prompt, n, p);
      std::vector<int32_t> all = prompt;
      all.insert(all.end(), want.begin(), want.end());
      const std::string truth = bytes_of(*bpe, all);
      for (bool via_bytes : {true, false}) {
        const std::shared_ptr<const TokenText> dt = via_bytes ? std::shared_ptr<const TokenText>(bytes) : bpe;
        RetokenizingDrafter d(bpe, dt, std::make_unique<KnownTextDrafter>(dt, truth), target->info().vocab);
        Session spec(*target);
        SpeculationStats st;
        EXPECT_EQ(decode_with(spec, prompt, n, p, d, &st), want) << text << ", temperature " << temp;
        EXPECT_GT(st.accepted, st.proposed / 2) << text << ", temperature " << temp << ", via bytes " << via_bytes;
        EXPECT_LT(st.forward_passes(), n * 2 / 3) << text << ", temperature " << temp << ", via bytes " << via_bytes;
      }
    }
  }
}

// Forwards to a RetokenizingDrafter and adds up what the draft model must
// feed at each call besides the new settled ids: the tail and the proposals.
class Tally : public Drafter {
 public:
  explicit Tally(RetokenizingDrafter& d) : d_(d) {}
  std::vector<int32_t> propose(const std::vector<int32_t>& h, int64_t max) override {
    auto out = d_.propose(h, max);
    calls++;
    // (+1: with no tail, the last settled id is fed again for its logits)
    per_call += int64_t(d_.draft_history().size() - d_.settled_ids().size()) + d_.last_ask() + 1;
    return out;
  }
  RetokenizingDrafter& d_;
  int64_t calls = 0, per_call = 0;
};

// The draft model keeps its state across calls: it feeds the settled ids once
// and at each call only the re-tokenised tail and its proposals, never the
// whole text again (a drafter that started over at every call would feed the
// long prompt once per call).
TEST(CrossTokenizerDrafts, DraftModelDoesNotStartOver) {
  for (const auto& dir : kDirections) {
    auto target = load_model(test::fixture(dir.target), test::on_test_device());
    auto draft = load_model(test::fixture(dir.draft), test::on_test_device());
    const auto tt = model_token_text(test::fixture(dir.target), target->info().vocab);
    const auto dt = model_token_text(test::fixture(dir.draft), draft->info().vocab);
    auto inner = std::make_unique<ModelDrafter>(*draft, draft->info().vocab);
    ModelDrafter* md = inner.get();
    RetokenizingDrafter d(tt, dt, std::move(inner), target->info().vocab);
    Tally tally(d);
    // As long as the byte-level model's context (256 positions) allows.
    const std::string text = std::string(kPrompts[0]) + ". " + kPrompts[1];
    const std::vector<int32_t> prompt = tt->encode(text);
    Session s(*target);
    SpeculationStats st;
    decode_with(s, prompt, 16, SamplingParams{.temperature = 0}, tally, &st, /*max_draft=*/2);
    ASSERT_GE(tally.calls, 8);
    const int64_t hist = int64_t(d.draft_history().size());
    EXPECT_GE(md->fed(), hist);
    EXPECT_LE(md->fed(), hist + tally.per_call) << dir.target << " <- " << dir.draft;
    EXPECT_LT(hist + tally.per_call, tally.calls * hist / 2) << "the bound does not tell starting over apart";
  }
}

// A draft model with a shorter context than the target's drafts less near its
// end, and nothing past it, instead of failing the target's generation.
TEST(CrossTokenizerDrafts, DraftModelStaysWithinItsContext) {
  auto draft = load_model(test::fixture(kBytes), test::on_test_device());
  const int64_t ctx = draft->info().max_positions;
  ASSERT_EQ(ctx, 256);
  ModelDrafter d(*draft, draft->info().vocab);
  const std::vector<int32_t> h(size_t(ctx - 2), 'a');
  EXPECT_EQ(d.propose(h, 8).size(), 3u);
  EXPECT_EQ(d.propose(std::vector<int32_t>(size_t(ctx), 'a'), 8).size(), 1u);
  EXPECT_TRUE(d.propose(std::vector<int32_t>(size_t(ctx + 40), 'a'), 8).empty());
}

// Asked for drafts, comes back empty; counts the calls.
class EmptyDrafter : public Drafter {
 public:
  explicit EmptyDrafter(bool costly) : costly_(costly) {}
  std::vector<int32_t> propose(const std::vector<int32_t>&, int64_t) override {
    ++calls;
    return {};
  }
  bool costs_when_empty() const override { return costly_; }
  int64_t calls = 0;

 private:
  bool costly_;
};

// A draft model whose drafts keep coming back empty (across tokenizers: text
// that does not make whole target tokens, a random model's bytes) costs its
// drafting time at every step unless the gate pauses it, as it pauses drafts
// that are rejected; a lookup that finds nothing costs nothing and is asked
// at every step as before.
TEST(CrossTokenizerDrafts, GatePausesADraftModelThatComesBackEmpty) {
  auto model = load_model(test::fixture(kBytes), test::on_test_device());
  const std::vector<int32_t> prompt = {'I', 'n', ' ', 't', 'h', 'e'};
  const int64_t n = 160;
  Session plain(*model);
  const auto want = generate_greedy(plain, prompt, n, true);
  SpeculationOptions o;
  o.pass_cost = [](int64_t tokens) { return 0.01 * (1 + 0.2 * double(tokens - 1)); };
  for (bool costly : {true, false}) {
    EmptyDrafter d(costly);
    Session s(*model);
    SpeculationStats st;
    EXPECT_EQ(generate_speculative(s, prompt, n, true, d, o, &st), want);
    if (costly) {
      EXPECT_LT(d.calls, n / 5) << "not paused";
      EXPECT_GT(st.off_steps, n / 2);
    } else {
      EXPECT_GT(d.calls, n - 4);
    }
  }
}

// The same tokenizer (or both without tokenizer files) shares ids; another
// goes through text; what cannot be read as text is refused, saying why.
TEST(CrossTokenizerDrafts, ChoosesByTheTokenizersAndRefusesWhatHasNoText) {
  const std::string shipped = test::fixture(kShipped), bytes = test::fixture(kBytes);
  EXPECT_TRUE(same_token_text(shipped, shipped));
  EXPECT_TRUE(same_token_text(bytes, test::fixture("golden/gpt_oss_tiny")));
  EXPECT_FALSE(same_token_text(shipped, bytes));
  auto target = load_model(shipped, test::on_test_device());
  DraftChoice c;
  c.model_dir = shipped;
  EXPECT_NE(dynamic_cast<ModelDrafter*>(choose_drafter(c, *target).get()), nullptr);
  c.retokenize = true;
  EXPECT_NE(dynamic_cast<RetokenizingDrafter*>(choose_drafter(c, *target).get()), nullptr);
  // Both without tokenizer files, the draft model with more ids than the target: through text (byte ids).
  test::TempDir syn;
  const std::string small = syn.file("small");
  auto made = test::run_sluice({"synth", "--arch", "qwen3_moe", "--preset", "small", "--vocab", "512", "--out", small,
                                "--quiet"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  {
    auto t512 = load_model(small, test::on_test_device());
    DraftChoice b;
    b.model_dir = bytes;
    auto d = choose_drafter(b, *t512);
    EXPECT_NE(dynamic_cast<RetokenizingDrafter*>(d.get()), nullptr);
    const std::vector<int32_t> prompt = {'G', 'o', 'd', ' ', 's', 'a', 'i', 'd'};
    Session plain(*t512), spec(*t512);
    SpeculationStats st;
    EXPECT_EQ(decode_with(spec, prompt, 24, SamplingParams{.temperature = 0}, *d, &st),
              test::sample_plainly(plain, prompt, 24, SamplingParams{.temperature = 0}));
  }
  // Fewer than 256 ids and no tokenizer files: no text.
  try {
    model_token_text(bytes, 200);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("256"), std::string::npos) << e.what();
  }
  // A draft model whose tokenizer file is broken: the error names the option and the file.
  test::TempDir tmp;
  const std::string broken = test::copy_golden(tmp, "qwen3_moe_tiny");
  std::ofstream(broken + "/tokenizer.json") << "{not json";
  c.retokenize = false;
  c.model_dir = broken;
  try {
    choose_drafter(c, *target);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sluice::cross_tokenizer_drafts_test
