// sluice generate: greedy or sampled continuation of a token prompt, or of text (optionally
// rendered as a user message by the conversation layer, chat::ChatCodec, exactly as `serve`
// and `chat` render it), streaming the decoded text.
#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "chat/api_error.h"
#include "chat/chat_codec.h"
#include "cli/commands.h"
#include "cli/memory_options.h"
#include "cli/text_generation.h"
#include "engine/engine.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "format/model_layout.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace sluice::cli {

namespace {

struct GenerateOptions {
  std::string model, tokens, prompt, system, tokenizer, effort;
  bool chat = false, no_think = false;
  TextGenOptions gen;
  MemoryRequest mem;
};

// --tokens: prints the new ids as a JSON array.
int generate_from_tokens(GenerateOptions& o) {
  std::vector<int32_t> prompt = parse_token_list(o.tokens);
  o.mem.context_tokens = int64_t(prompt.size()) + o.gen.max_new;
  auto model = Engine::open(o.model, o.mem);
  print_plan(o.gen, *model);
  make_drafter(o.gen, *model);
  Session s = model->session();
  std::vector<int32_t> ids = generate_tokens(s, prompt, o.gen);
  std::string line = "[";
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? "," : "") + std::to_string(ids[i]);
  std::printf("%s]\n", line.c_str());
  return 0;
}

// --prompt: streams the text, of a user message with --chat.
int generate_from_text(GenerateOptions& o) {
  const std::string tdir = o.tokenizer.empty() ? o.model : o.tokenizer;
  std::unique_ptr<chat::ChatCodec> codec;  // --chat
  std::unique_ptr<text::Tokenizer> tok;    // plain text
  std::vector<int32_t> prompt;
  if (o.chat) {
    // The codec checks the tokenizer against the model's vocabulary, read from config.json
    // because the memory plan is sized from the rendered prompt before the model opens.
    codec = chat::make_chat_codec(tdir, ModelLayout::text_config(Config::load(o.model)).req_int("vocab_size"));
    nlohmann::json msgs = nlohmann::json::array();
    if (!o.system.empty()) msgs.push_back({{"role", "system"}, {"content", o.system}});
    msgs.push_back({{"role", "user"}, {"content", o.prompt}});
    try {
      prompt = codec->render_chat(msgs, nullptr, chat::ChatOptions{o.no_think ? "none" : o.effort});
    } catch (const chat::ApiError& e) {
      fail("{}: {}", tdir, e.what());
    }
  } else {
    tok = text::Tokenizer::load(tdir);
    prompt = encode_text(*tok, o.prompt);
  }
  o.mem.context_tokens = int64_t(prompt.size()) + o.gen.max_new;
  auto model = Engine::open(o.model, o.mem);
  check_prompt(*model, prompt);
  print_plan(o.gen, *model);
  make_drafter(o.gen, *model);
  Session s = model->session();
  if (codec) stream_reply(s, *codec, prompt, o.gen, stdout);
  else stream_text(s, *tok, prompt, o.gen, stdout);
  std::fputc('\n', stdout);
  return 0;
}

void add_generate_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "generate",
      "Generation (greedy unless --temperature). With --tokens prints the new token ids as a JSON array; with --prompt "
      "streams the decoded text");
  auto o = std::make_shared<GenerateOptions>();
  o->gen.max_new = 16;
  cmd->add_option("--model", o->model, "Model directory (default: $SLUICE_MODEL or the shipped sluice-k3-mini)");
  auto* tk = cmd->add_option("--tokens", o->tokens, "Prompt as comma-separated token ids");
  auto* pr = cmd->add_option("--prompt", o->prompt, "Prompt text (encoded with the model's tokenizer)");
  tk->excludes(pr);
  cmd->add_flag("--chat", o->chat, "Render --prompt as a user message through the model's chat template");
  cmd->add_option("--system", o->system, "With --chat: a system message before the prompt");
  cmd->add_option("--reasoning-effort", o->effort,
                  "With --chat: none, low, medium, high or max (K3's thinking effort; a Jinja template sees it as "
                  "reasoning_effort, and none also as enable_thinking=false)")
      ->check(CLI::IsMember({"none", "low", "medium", "high", "max"}));
  cmd->add_flag("--no-think", o->no_think, "With --chat: the same as --reasoning-effort none");
  cmd->add_option("--tokenizer", o->tokenizer, "Directory with the tokenizer and chat template (default: --model)");
  cmd->add_option("--max-new", o->gen.max_new, "Maximum number of tokens to generate")->capture_default_str();
  cmd->add_flag("--ignore-eos", o->gen.ignore_eos, "Keep generating after an end-of-sequence token");
  add_generation_options(cmd, o->gen);
  add_memory_options(cmd, o->mem);
  cmd->callback([o, tk, pr, &action] {
    action = [o, tk, pr] {
      if (!*tk && !*pr) fail("generate: give --tokens or --prompt");
      if (o->chat && !*pr) fail("--chat needs --prompt");
      if (!o->chat && (!o->system.empty() || o->no_think || !o->effort.empty()))
        fail("--system, --reasoning-effort and --no-think need --chat");
      if (o->no_think && !o->effort.empty() && o->effort != "none")
        fail("--no-think contradicts --reasoning-effort {}", o->effort);
      check_generation_options(o->gen);
      apply_memory_options(o->mem);
      o->model = model_or_default(o->model);
      return *tk ? generate_from_tokens(*o) : generate_from_text(*o);
    };
  });
}

}  // namespace
SLUICE_COMMAND(10, add_generate_command);

}  // namespace sluice::cli
