// Generation with text out, shared by generate --prompt, run and chat:
// greedy or sampled decoding, optionally n-gram speculative (same output),
// streaming decoded text as tokens arrive (partial UTF-8 held back), stopping
// at the model's stop ids.
#pragma once
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/drafter.h"
#include "engine/engine.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "chat/chat_codec.h"
#include "text/tokenizer.h"

namespace sluice::cli {

struct TextGenOptions {
  int64_t max_new = 256;
  bool ignore_eos = false;    // also ignores stop_ids
  std::vector<int32_t> stop_ids;  // ids that end the text besides the model's eos ids (a chat's end of turn)
  bool speculate = false;
  int64_t draft_max = 8;
  bool no_draft_gate = false;  // always draft draft_max tokens (--no-draft-gate)
  bool stats = false;  // speculation / expert statistics to stderr
  int64_t prefill_chunk = 0;  // tokens per prefill pass; 0: as many as the memory plan allows
  int64_t prefill_span = -1;  // tokens per layer-by-layer span; -1: the plan's, 0: none
  SamplingParams sampling{.temperature = 0};  // greedy unless --temperature
  DraftChoice draft;         // --draft, --ngram, --suffix-tokens, --draft-model
  std::shared_ptr<Drafter> drafter;  // made by make_drafter() once the target is loaded
};

// --speculate, --draft, --draft-max, --stats and the sampling options, shared by the generating commands.
void add_generation_options(CLI::App* cmd, TextGenOptions& g);
// --draft-max, --no-draft-gate, --ngram and --suffix-tokens (generate, run, chat and serve).
void add_draft_length_options(CLI::App* cmd, int64_t& draft_max, bool& no_gate, DraftChoice& d);
// Checks the values given (throws sluice::Error naming the option).
void check_generation_options(const TextGenOptions& g);
// Sets g.drafter for the target model: the draft model, suffix drafts or n-gram lookup when speculating.
void make_drafter(TextGenOptions& g, const Model& target);

// Decodes after `prompt` (fed first) as the options say; on_token sees every token.
// history: tokens before `prompt` already in `s` are taken from the session.
std::vector<int32_t> generate_tokens(Session& s, const std::vector<int32_t>& prompt, const TextGenOptions& o,
                                     const std::function<void(int32_t)>& on_token = {});

// Returns the generated ids, stop token excluded.
std::vector<int32_t> stream_text(Session& s, const text::Tokenizer& tok, const std::vector<int32_t>& prompt,
                                 const TextGenOptions& o, std::FILE* out);
// The same for a conversation the codec rendered: decoded by the codec, ending
// at its end-of-turn ids as well (generate --chat; the text is the raw reply,
// reasoning markers included).
std::vector<int32_t> stream_reply(Session& s, const chat::ChatCodec& codec, const std::vector<int32_t>& prompt,
                                  TextGenOptions o, std::FILE* out);

// Text -> ids, checking that the tokenizer fits the model.
std::vector<int32_t> encode_prompt(const text::Tokenizer& tok, const Model& model, const std::string& text);
// The same in two steps, for commands that size the memory plan from the prompt before opening the model.
std::vector<int32_t> encode_text(const text::Tokenizer& tok, const std::string& text);
void check_prompt(const Model& model, const std::vector<int32_t>& ids);
// With --stats: the engine's memory plan on stderr.
void print_plan(const TextGenOptions& g, const Engine& engine);

}  // namespace sluice::cli
