#include "cli/text_generation.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "cli/memory_options.h"
#include "cluster/cluster.h"
#include "engine/drafter.h"
#include "engine/prefill_progress.h"
#include "runtime/retokenizing_drafter.h"
#include "util/error.h"
#include "util/progress.h"

namespace sluice::cli {

std::vector<int32_t> encode_text(const text::Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids = tok.encode(text);
  if (ids.empty()) fail("the prompt encodes to no tokens");
  return ids;
}

void check_prompt(const Model& model, const std::vector<int32_t>& ids) {
  for (int32_t id : ids)
    if (id >= model.info().vocab)
      fail("prompt token {} is outside the model's vocabulary ({}): tokenizer and model do not match", id,
           model.info().vocab);
}

std::vector<int32_t> encode_prompt(const text::Tokenizer& tok, const Model& model, const std::string& text) {
  std::vector<int32_t> ids = encode_text(tok, text);
  check_prompt(model, ids);
  return ids;
}

void print_plan(const TextGenOptions& g, const Engine& engine) {
  if (g.stats) std::fprintf(stderr, "%s\n", engine.plan().describe().c_str());
}

void add_draft_length_options(CLI::App* cmd, int64_t& draft_max, bool& no_gate, DraftChoice& d) {
  cmd->add_option("--draft-max", draft_max,
                  "With --speculate: most draft tokens verified per pass (the gate drafts fewer, or none, when "
                  "that pays better)")
      ->capture_default_str();
  cmd->add_flag("--no-draft-gate", no_gate,
                "With --speculate: draft --draft-max tokens at every step, whether or not it pays (measuring a "
                "drafter, tests)");
  cmd->add_option("--ngram", d.ngram, "With --draft ngram: longest suffix (in tokens) looked up")
      ->capture_default_str();
  cmd->add_option("--suffix-tokens", d.suffix.max_tokens,
                  "With --draft suffix: tokens the suffix index holds at most (about 100-150 bytes each; the "
                  "oldest documents are evicted first)")
      ->capture_default_str();
}

void add_generation_options(CLI::App* cmd, TextGenOptions& g) {
  cmd->add_flag("--speculate", g.speculate,
                "Speculative decoding: drafts are verified in one pass (same output, greedy or sampled); n-gram "
                "drafts unless --draft or --draft-model says otherwise. A gate measures acceptance and the cost of "
                "verification passes against plain steps and drafts only while that pays (--stats reports it)");
  cmd->add_option("--draft", g.draft.kind,
                  "Drafter (implies --speculate): ngram (what followed the longest recent match of the last "
                  "--ngram tokens in the text so far) or suffix (a suffix index of the text so far, up to "
                  "--suffix-tokens tokens: the most frequent continuation of the longest earlier match, as long as "
                  "the match)")
      ->check(CLI::IsMember({"ngram", "suffix"}));
  add_draft_length_options(cmd, g.draft_max, g.no_draft_gate, g.draft);
  cmd->add_option("--draft-model", g.draft.model_dir,
                  "Speculate with this smaller model's greedy continuation instead (implies --speculate). With "
                  "another tokenizer than the target's it drafts through text: the target's text is tokenised "
                  "for it and its draft tokenised again with the target's tokenizer (a model without tokenizer "
                  "files reads ids 0-255 as bytes). K3's own drafters, DSpark (config model_type k3_dspark) and "
                  "EAGLE-3 with MLA (architectures Eagle3*), read the target's hidden states from its own passes "
                  "and borrow its embedding");
  cmd->add_flag("--draft-retokenize", g.draft.retokenize,
                "With --draft-model: draft through text even when the draft model has the target's tokenizer "
                "(measuring the cost of drafting across tokenizers)");
  cmd->add_option("--temperature", g.sampling.temperature, "Sampling temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-p", g.sampling.top_p, "Sample from the smallest set of tokens with this much probability")
      ->capture_default_str();
  cmd->add_option("--top-k", g.sampling.top_k, "Sample from the k most likely tokens (0: all)")->capture_default_str();
  cmd->add_option("--min-p", g.sampling.min_p, "Drop tokens less likely than this times the most likely one")
      ->capture_default_str();
  cmd->add_option("--seed", g.sampling.seed, "Seed of the sampler (the same seed gives the same text)")
      ->capture_default_str();
  cmd->add_flag("--stats", g.stats, "Print speculation and expert I/O statistics to stderr");
  cmd->add_option("--prefill-chunk", g.prefill_chunk,
                  "Prompt tokens per forward pass (0: as many as the memory plan's activation reserve allows; each "
                  "pass reads each routed expert it needs once per layer)")
      ->capture_default_str();
  add_prefill_span_option(cmd, g.prefill_span);
}

void check_generation_options(const TextGenOptions& g) {
  if (g.max_new < 0) fail("--max-new must be >= 0, got {}", g.max_new);
  if (g.draft_max < 1) fail("--draft-max must be >= 1, got {}", g.draft_max);
  check_draft_choice(g.draft);
  if (!(g.sampling.temperature >= 0)) fail("--temperature must be >= 0, got {}", g.sampling.temperature);
  if (!(g.sampling.top_p > 0 && g.sampling.top_p <= 1)) fail("--top-p must be in (0, 1], got {}", g.sampling.top_p);
  if (g.sampling.top_k < 0) fail("--top-k must be >= 0, got {}", g.sampling.top_k);
  if (g.prefill_chunk < 0) fail("--prefill-chunk must be >= 1 (or 0: as the memory plan allows), got {}", g.prefill_chunk);
  if (!(g.sampling.min_p >= 0 && g.sampling.min_p <= 1)) fail("--min-p must be in [0, 1], got {}", g.sampling.min_p);
}

void make_drafter(TextGenOptions& g, const Model& target) {
  g.draft.speculate = g.speculate;
  g.drafter = choose_drafter(g.draft, target);
  g.speculate = g.drafter != nullptr;
  if (const auto* r = dynamic_cast<const RetokenizingDrafter*>(g.drafter.get()); r && g.stats)
    std::fprintf(stderr, "[draft model %s %s]\n", g.draft.model_dir.c_str(), r->describe().c_str());
}

namespace {
// A progress line on stderr while a long prompt is prefilled (on a terminal,
// or always with --stats): tokens done, experts read, time left.
std::unique_ptr<PrefillMeter> prefill_meter(const Session& s, int64_t tokens, bool stats) {
  const auto* engine = dynamic_cast<const Engine*>(&s.model());
  if (!engine || tokens < 256 || !(stats || isatty(STDERR_FILENO))) return nullptr;
  auto last = std::make_shared<std::chrono::steady_clock::time_point>();
  return std::make_unique<PrefillMeter>(*engine, tokens, s.prefill_piece(), [last, tokens](const PrefillProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    if (p.tokens_done < double(tokens) && now - *last < std::chrono::milliseconds(250)) return;
    *last = now;
    std::fprintf(stderr, "\r[prefill: %.0f of %lld tokens, %llu experts (%s) read, %.1f s, about %.0f s left]  ",
                 p.tokens_done, (long long)p.tokens_total, (unsigned long long)p.experts_read,
                 human_bytes(double(p.expert_bytes_read)).c_str(), p.seconds, p.eta_seconds);
    std::fflush(stderr);
  });
}
}  // namespace

namespace {
// An end-of-sequence id of the model, or one of the options' stop ids.
bool ends_text(const Model& m, const TextGenOptions& o, int32_t t) {
  const auto& eos = m.info().eos_ids;
  return std::find(eos.begin(), eos.end(), t) != eos.end() ||
         std::find(o.stop_ids.begin(), o.stop_ids.end(), t) != o.stop_ids.end();
}
}  // namespace

std::vector<int32_t> generate_tokens(Session& s, const std::vector<int32_t>& prompt, const TextGenOptions& o,
                                     const std::function<void(int32_t)>& on_token) {
  if (o.max_new <= 0) return {};
  if (o.speculate && !o.drafter) fail("internal: speculation without a drafter (make_drafter not called)");
  const int64_t ctx = s.model().info().max_positions;
  if (ctx > 0 && s.position() + int64_t(prompt.size()) + o.max_new > ctx) {
    if (s.position() > 0)
      fail("the conversation so far ({} tokens), this prompt ({}) and --max-new {} do not fit in the model's context "
           "of {} positions",
           s.position(), prompt.size(), o.max_new, ctx);
    fail("the prompt ({} tokens) and --max-new {} do not fit in the model's context of {} positions", prompt.size(),
         o.max_new, ctx);
  }
  const int64_t V = s.model().info().vocab;
  Sampler sampler(o.sampling);
  auto pick = [&](float* logits) { return sampler.sample(logits, V).token; };
  SpeculationOptions so;
  so.max_draft = o.draft_max;
  // The draft gate decides from timings, which differ between the ranks of an
  // mpirun job: there every rank must make the same passes, so it stays off.
  so.adaptive = !o.no_draft_gate && (!process_cluster() || process_cluster()->ranks() == 1);
  SpeculationStats st;
  const ExpertStats before = s.model().expert_stats();
  ExpertStats after_prompt = before;
  if (o.prefill_chunk > 0) s.set_prefill_chunk(o.prefill_chunk);
  if (o.prefill_span >= 0) s.set_prefill_span(o.prefill_span);
  std::unique_ptr<PrefillMeter> meter = prefill_meter(s, int64_t(prompt.size()), o.stats);
  auto seen = [&](int32_t t) {
    if (st.generated == 1) {  // the prompt is in, nothing fed after it yet
      after_prompt = s.model().expert_stats();
      if (meter) {
        std::fputc('\n', stderr);
        meter.reset();
      }
    }
    if (on_token) on_token(t);
  };
  std::vector<int32_t> out;
  capture_for_drafter(s, o.speculate ? o.drafter.get() : nullptr);
  std::vector<float> logits = s.feed(prompt);
  auto take = [&](int32_t t) {
    out.push_back(t);
    seen(t);
    return o.ignore_eos || !ends_text(s.model(), o, t);
  };
  decode(s, std::move(logits), s.tokens(), o.max_new, pick, take, o.speculate ? o.drafter.get() : nullptr, so, &st);
  if (o.stats) {
    const ExpertStats after = s.model().expert_stats();
    if (o.speculate) std::fprintf(stderr, "%s\n", describe_speculation(st).c_str());
    const double n = double(std::max<int64_t>(1, st.generated));
    std::fprintf(stderr,
                 "[experts: %s needed, %s read from storage in all; while generating %s needed and %s read per token]\n",
                 human_bytes(double(after.bytes_needed - before.bytes_needed)).c_str(),
                 human_bytes(double(after.bytes_read - before.bytes_read)).c_str(),
                 human_bytes(double(after.bytes_needed - after_prompt.bytes_needed) / n).c_str(),
                 human_bytes(double(after.bytes_read - after_prompt.bytes_read) / n).c_str());
    if (after.device_hits + after.device_bytes_copied > 0)
      std::fprintf(stderr, "[GPU: %s of experts copied host -> device per generated token, %.3f s copying in all]\n",
                   human_bytes(double(after.device_bytes_copied - after_prompt.device_bytes_copied) / n).c_str(),
                   after.device_copy_seconds - before.device_copy_seconds);
    if (after.host_expert_calls > before.host_expert_calls)
      std::fprintf(stderr, "[experts computed: %.1f on the host (%.2f ms of host time), %.1f on the GPU per generated token]\n",
                   double(after.host_expert_calls - after_prompt.host_expert_calls) / n,
                   1e3 * (after.host_expert_seconds - after_prompt.host_expert_seconds) / n,
                   double(after.device_expert_calls - after_prompt.device_expert_calls) / n);
  }
  return out;
}

namespace {
// Decodes as generate_tokens does and writes each token's text as it comes
// (`piece` turns an id into text, `rest` returns what it still holds at the end);
// the stop token ends the text and is not part of it.
std::vector<int32_t> stream(Session& s, const std::vector<int32_t>& prompt, const TextGenOptions& o, std::FILE* out,
                            const std::function<std::string(int32_t)>& piece, const std::function<std::string()>& rest) {
  std::vector<int32_t> kept;
  auto on_token = [&](int32_t id) {
    if (!o.ignore_eos && ends_text(s.model(), o, id)) return;
    kept.push_back(id);
    const std::string p = piece(id);
    std::fwrite(p.data(), 1, p.size(), out);
    std::fflush(out);
  };
  generate_tokens(s, prompt, o, on_token);
  const std::string r = rest();
  std::fwrite(r.data(), 1, r.size(), out);
  return kept;
}
}  // namespace

std::vector<int32_t> stream_text(Session& s, const text::Tokenizer& tok, const std::vector<int32_t>& prompt,
                                 const TextGenOptions& o, std::FILE* out) {
  text::IncrementalDecoder dec(tok);
  auto piece = [&](int32_t id) {
    if (!tok.valid_id(id)) fail("generated token {} is not in the tokenizer's vocabulary", id);
    return dec.push(id);
  };
  return stream(s, prompt, o, out, piece, [&] { return dec.flush(); });
}

std::vector<int32_t> stream_reply(Session& s, const chat::ChatCodec& codec, const std::vector<int32_t>& prompt,
                                  TextGenOptions o, std::FILE* out) {
  for (int32_t id : codec.stop_ids()) o.stop_ids.push_back(id);
  auto dec = codec.detokenizer();
  return stream(s, prompt, o, out, [&](int32_t id) { return dec->push(id); }, [&] { return dec->flush(); });
}

}  // namespace sluice::cli
