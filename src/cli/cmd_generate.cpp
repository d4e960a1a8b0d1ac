// sluice generate: greedy continuation of a token prompt, or of text (optionally
// rendered through the model's chat template), streaming the decoded text.
#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "model/model.h"
#include "cli/text_generation.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace sluice::cli {

namespace {
void add_generate_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "generate",
      "Greedy generation. With --tokens prints the new token ids as a JSON array; with --prompt streams the decoded text");
  struct Opts {
    std::string model, tokens, prompt, system, tokenizer;
    int64_t max_new = 16, draft_max = 8;
    bool ignore_eos = false, chat = false, no_think = false, speculate = false, stats = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "Model directory (default: $SLUICE_MODEL or the shipped sluice-k3-mini)");
  auto* tk = cmd->add_option("--tokens", o->tokens, "Prompt as comma-separated token ids");
  auto* pr = cmd->add_option("--prompt", o->prompt, "Prompt text (encoded with the model's tokenizer)");
  tk->excludes(pr);
  cmd->add_flag("--chat", o->chat, "Render --prompt as a user message through the model's chat template");
  cmd->add_option("--system", o->system, "With --chat: a system message before the prompt");
  cmd->add_flag("--no-think", o->no_think, "With --chat: pass enable_thinking=false to the template");
  cmd->add_option("--tokenizer", o->tokenizer, "Directory with the tokenizer and chat template (default: --model)");
  cmd->add_option("--max-new", o->max_new, "Maximum number of tokens to generate")->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating after an end-of-sequence token");
  cmd->add_flag("--speculate", o->speculate, "n-gram speculative decoding (same output, fewer passes over the experts)");
  cmd->add_option("--draft-max", o->draft_max, "With --speculate: most draft tokens verified per pass")->capture_default_str();
  cmd->add_flag("--stats", o->stats, "Print speculation and expert I/O statistics to stderr");
  cmd->callback([o, tk, pr, &action] {
    action = [o, tk, pr] {
      if (!*tk && !*pr) fail("generate: give --tokens or --prompt");
      if (o->chat && !*pr) fail("--chat needs --prompt");
      if (o->max_new < 0) fail("--max-new must be >= 0, got {}", o->max_new);
      if (o->draft_max < 1) fail("--draft-max must be >= 1, got {}", o->draft_max);
      o->model = model_or_default(o->model);
      if (*tk) {
        std::vector<int32_t> prompt = parse_token_list(o->tokens);
        auto model = load_model(o->model);
        Session s(*model);
        std::vector<int32_t> ids;
        if (o->speculate) {
          NgramDrafter drafter;
          SpeculationOptions so;
          so.max_draft = o->draft_max;
          SpeculationStats st;
          ids = generate_speculative(s, prompt, o->max_new, o->ignore_eos, drafter, so, &st);
          if (o->stats)
            std::fprintf(stderr, "[speculation: %lld tokens in %lld passes, acceptance %.0f%%]\n",
                         (long long)st.generated, (long long)st.passes, 100 * st.acceptance());
        } else {
          ids = generate_greedy(s, prompt, o->max_new, o->ignore_eos);
        }
        std::string line = "[";
        for (size_t i = 0; i < ids.size(); ++i) line += (i ? "," : "") + std::to_string(ids[i]);
        std::printf("%s]\n", line.c_str());
        return 0;
      }
      const std::string tdir = o->tokenizer.empty() ? o->model : o->tokenizer;
      auto tok = text::Tokenizer::load(tdir);
      std::string text = o->prompt;
      if (o->chat) {
        auto tmpl = text::ChatTemplate::load(tdir);
        nlohmann::json msgs = nlohmann::json::array();
        if (!o->system.empty()) msgs.push_back({{"role", "system"}, {"content", o->system}});
        msgs.push_back({{"role", "user"}, {"content", o->prompt}});
        nlohmann::json extra = nlohmann::json::object();
        if (o->no_think) extra["enable_thinking"] = false;
        text = tmpl.render(msgs, nullptr, true, extra);
      }
      auto model = load_model(o->model);
      std::vector<int32_t> prompt = encode_prompt(*tok, *model, text);
      Session s(*model);
      TextGenOptions g;
      g.max_new = o->max_new;
      g.ignore_eos = o->ignore_eos;
      g.speculate = o->speculate;
      g.draft_max = o->draft_max;
      g.stats = o->stats;
      stream_text(s, *tok, prompt, g, stdout);
      std::fputc('\n', stdout);
      return 0;
    };
  });
}

}  // namespace
SLUICE_COMMAND(10, add_generate_command);

}  // namespace sluice::cli
