// sluice generate: greedy continuation of a token prompt, or of text (optionally
// rendered through the model's chat template), streaming the decoded text.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "model/model.h"
#include "runtime/session.h"
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
    int64_t max_new = 16;
    bool ignore_eos = false, chat = false, no_think = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "Model directory")->required();
  auto* tk = cmd->add_option("--tokens", o->tokens, "Prompt as comma-separated token ids");
  auto* pr = cmd->add_option("--prompt", o->prompt, "Prompt text (encoded with the model's tokenizer)");
  tk->excludes(pr);
  cmd->add_flag("--chat", o->chat, "Render --prompt as a user message through the model's chat template");
  cmd->add_option("--system", o->system, "With --chat: a system message before the prompt");
  cmd->add_flag("--no-think", o->no_think, "With --chat: pass enable_thinking=false to the template");
  cmd->add_option("--tokenizer", o->tokenizer, "Directory with the tokenizer and chat template (default: --model)");
  cmd->add_option("--max-new", o->max_new, "Maximum number of tokens to generate")->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating after an end-of-sequence token");
  cmd->callback([o, tk, pr, &action] {
    action = [o, tk, pr] {
      if (!*tk && !*pr) fail("generate: give --tokens or --prompt");
      if (o->chat && !*pr) fail("--chat needs --prompt");
      if (o->max_new < 0) fail("--max-new must be >= 0, got {}", o->max_new);
      if (*tk) {
        std::vector<int32_t> prompt = parse_token_list(o->tokens);
        auto model = load_model(o->model);
        Session s(*model);
        auto ids = generate_greedy(s, prompt, o->max_new, o->ignore_eos);
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
      std::vector<int32_t> prompt = tok->encode(text);
      if (prompt.empty()) fail("--prompt encodes to no tokens");
      auto model = load_model(o->model);
      for (int32_t id : prompt)
        if (id >= model->info().vocab)
          fail("prompt token {} is outside the model's vocabulary ({}): tokenizer and model do not match", id,
               model->info().vocab);
      Session s(*model);
      text::IncrementalDecoder dec(*tok);
      generate_greedy(s, prompt, o->max_new, o->ignore_eos, [&](int32_t id) {
        if (!tok->valid_id(id)) fail("generated token {} is not in the tokenizer's vocabulary", id);
        std::string piece = dec.push(id);
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      });
      std::string rest = dec.flush();
      rest += '\n';
      std::fwrite(rest.data(), 1, rest.size(), stdout);
      return 0;
    };
  });
}

}  // namespace
SLUICE_COMMAND(10, add_generate_command);

}  // namespace sluice::cli
