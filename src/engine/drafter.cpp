#include "engine/drafter.h"

#include <algorithm>
#include <filesystem>
#include <unordered_set>

#include "engine/engine.h"
#include "format/config.h"
#include "model/decoder.h"
#include "model/dspark.h"
#include "model/eagle3.h"
#include "runtime/hidden_state_drafter.h"
#include "runtime/model_drafter.h"
#include "runtime/retokenizing_drafter.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace sluice {

namespace {

bool has_tokenizer_files(const std::string& dir) {
  namespace fs = std::filesystem;
  return fs::exists(fs::path(dir) / "tokenizer.json") || fs::exists(fs::path(dir) / "tiktoken.model");
}

class TokenizerText : public TokenText {
 public:
  TokenizerText(std::unique_ptr<text::Tokenizer> tok, std::string dir) : tok_(std::move(tok)), dir_(std::move(dir)) {
    for (const auto& a : tok_->added_tokens()) added_.insert(a.id);
  }
  std::vector<int32_t> encode(std::string_view text) const override { return tok_->encode(text); }
  std::string bytes(int32_t id) const override {
    return tok_->valid_id(id) ? std::string(tok_->token_bytes(id)) : std::string();
  }
  std::optional<int32_t> id_of(std::string_view bytes) const override { return tok_->token_id(bytes); }
  bool merges() const override { return true; }
  bool is_added(int32_t id) const override { return added_.count(id) > 0; }
  std::string describe() const override { return fmt::format("{} of {}", tok_->kind(), dir_); }

 private:
  std::unique_ptr<text::Tokenizer> tok_;
  std::string dir_;
  std::unordered_set<int32_t> added_;
};

}  // namespace

void check_draft_choice(const DraftChoice& c) {
  if (!c.kind.empty() && c.kind != "ngram" && c.kind != "suffix")
    fail("--draft must be ngram or suffix, got '{}'", c.kind);
  if (!c.kind.empty() && !c.model_dir.empty())
    fail("--draft {} and --draft-model are two drafters: give one of them", c.kind);
  if (c.retokenize && c.model_dir.empty()) fail("--draft-retokenize is about a --draft-model: give one");
  if (c.ngram < 1) fail("--ngram must be >= 1, got {}", c.ngram);
  if (c.suffix.max_tokens < 1024) fail("--suffix-tokens must be >= 1024, got {}", c.suffix.max_tokens);
}

namespace {

// The same ids for the same bytes: vocabulary, added tokens and every id's bytes.
bool same_tokens(const text::Tokenizer& a, const text::Tokenizer& b) {
  if (a.vocab_size() != b.vocab_size() || a.added_tokens().size() != b.added_tokens().size()) return false;
  for (size_t i = 0; i < a.added_tokens().size(); ++i) {
    const auto &x = a.added_tokens()[i], &y = b.added_tokens()[i];
    if (x.id != y.id || x.content != y.content || x.special != y.special) return false;
  }
  for (int32_t id = 0; id < int32_t(a.vocab_size()); ++id) {
    if (a.valid_id(id) != b.valid_id(id)) return false;
    if (a.valid_id(id) && a.token_bytes(id) != b.token_bytes(id)) return false;
  }
  return true;
}

// A model's ids as text: `tok` when loaded already, else its tokenizer files, else byte ids.
std::shared_ptr<const TokenText> token_text(std::unique_ptr<text::Tokenizer> tok, const std::string& model_dir,
                                            int64_t model_vocab) {
  if (!tok && has_tokenizer_files(model_dir)) tok = text::Tokenizer::load(model_dir);
  if (tok) return std::make_shared<TokenizerText>(std::move(tok), model_dir);
  if (model_vocab < 256)
    fail("{} has no tokenizer files (tokenizer.json or tiktoken.model) and {} ids, fewer than the byte-level "
         "codec's 256: its ids cannot be read as text",
         model_dir, model_vocab);
  return std::make_shared<ByteTokenText>();
}

// Whether two models' ids are the same text, with the tokenizers loaded to tell (kept for reuse).
struct ComparedTokenizers {
  bool same = false;
  std::unique_ptr<text::Tokenizer> a, b;
};
ComparedTokenizers compare_tokenizers(const std::string& a_dir, const std::string& b_dir) {
  ComparedTokenizers c;
  const bool a_files = has_tokenizer_files(a_dir), b_files = has_tokenizer_files(b_dir);
  c.same = a_files == b_files;  // no files on either side: both byte ids
  if (a_files && b_files) {
    c.a = text::Tokenizer::load(a_dir);
    c.b = text::Tokenizer::load(b_dir);
    c.same = same_tokens(*c.a, *c.b);
  }
  return c;
}

}  // namespace

std::shared_ptr<const TokenText> model_token_text(const std::string& model_dir, int64_t model_vocab) {
  return token_text(nullptr, model_dir, model_vocab);
}

bool same_token_text(const std::string& a_dir, const std::string& b_dir) {
  return compare_tokenizers(a_dir, b_dir).same;
}

std::shared_ptr<Drafter> choose_drafter(const DraftChoice& c, const Model& target) {
  if (c.model_dir.empty()) return choose_drafter(c, target, std::string());
  const auto* engine = dynamic_cast<const Engine*>(&target);
  if (!engine) fail("internal: --draft-model needs the target model's directory (for its tokenizer)");
  return choose_drafter(c, target, engine->dir());
}

std::shared_ptr<Drafter> choose_drafter(const DraftChoice& c, const Model& target, const std::string& target_dir) {
  if (!c.model_dir.empty() && std::filesystem::exists(std::filesystem::path(c.model_dir) / "config.json") &&
      DSparkConfig::is_dspark(Config::load(c.model_dir))) {
    // K3's own block drafter: it reads the target's hidden rows and borrows its embedding and head.
    const auto* engine = dynamic_cast<const Engine*>(&target);
    if (!engine) fail("internal: a DSpark --draft-model needs the target engine (it borrows its embedding and head)");
    try {
      DSparkConfig::parse(Config::load(c.model_dir)).check_target(target.info());
      const Decoder& d = engine->decoder();
      return std::make_shared<HiddenStateDrafter>(
          std::make_unique<DSparkModel>(c.model_dir, engine->backend(), d.embedding(), d.head()));
    } catch (const Error& e) {
      fail("--draft-model {} (a DSpark drafter): {}", c.model_dir, e.what());
    }
  }
  if (!c.model_dir.empty() && std::filesystem::exists(std::filesystem::path(c.model_dir) / "config.json") &&
      Eagle3Config::is_eagle3(Config::load(c.model_dir))) {
    // An EAGLE-3 MLA drafter: it reads the target's hidden rows and borrows its embedding.
    const auto* engine = dynamic_cast<const Engine*>(&target);
    if (!engine) fail("internal: an EAGLE-3 --draft-model needs the target engine (it borrows its embedding)");
    try {
      return std::make_shared<HiddenStateDrafter>(std::make_unique<Eagle3Model>(
          c.model_dir, target.info(), engine->backend(), engine->decoder().embedding()));
    } catch (const Error& e) {
      fail("--draft-model {} (an EAGLE-3 drafter): {}", c.model_dir, e.what());
    }
  }
  if (!c.model_dir.empty()) {
    // Each tokenizer is loaded once: compared here, then kept for drafting through text.
    ComparedTokenizers cmp;
    if (!c.retokenize) {
      try {
        cmp = compare_tokenizers(target_dir, c.model_dir);
      } catch (const Error& e) {
        fail("--draft-model {}: comparing its tokenizer with the target's: {}", c.model_dir, e.what());
      }
    }
    const bool same = cmp.same;
    auto draft = Engine::open(c.model_dir);
    const int64_t dv = draft->info().vocab, tv = target.info().vocab;
    // Shared ids, unless the draft model's output names ids the target does not have (a larger padded vocabulary).
    if (same && dv <= tv) return std::make_shared<ModelDrafter>(std::move(draft), tv);
    // Another tokenizer: the draft model proposes in its own ids, which go through text.
    std::shared_ptr<const TokenText> tt, dt;
    try {
      tt = token_text(std::move(cmp.a), target_dir, tv);
      dt = token_text(std::move(cmp.b), c.model_dir, dv);
    } catch (const Error& e) {
      fail("--draft-model {} drafts through text ({}), which needs both models' ids read as text: {}", c.model_dir,
           c.retokenize ? "--draft-retokenize"
           : same       ? "the target's tokenizer, but a model with more ids than the target's"
                        : "another tokenizer than the target's",
           e.what());
    }
    return std::make_shared<RetokenizingDrafter>(tt, dt, std::make_unique<ModelDrafter>(std::move(draft), dv), tv);
  }
  if (c.kind == "suffix") return std::make_shared<SuffixDrafter>(c.suffix);
  if (c.speculate || c.kind == "ngram") return std::make_shared<NgramDrafter>(c.ngram, std::min<int64_t>(2, c.ngram));
  return nullptr;
}

}  // namespace sluice
