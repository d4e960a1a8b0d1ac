// sluice chat: a conversation on the terminal through the model's chat
// template. Each turn feeds only what the previous turns have not already put
// in the cache (the rendered conversation grows by appending).
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/memory_options.h"
#include "cli/text_generation.h"
#include "engine/engine.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace sluice::cli {
namespace {

void add_chat_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("chat", "Chat on the terminal (one line per message; /exit or end of input quits)");
  struct Opts {
    std::string model, system;
    TextGenOptions gen;
    MemoryRequest mem;
  };
  auto o = std::make_shared<Opts>();
  o->gen.max_new = 256;
  cmd->add_option("--model", o->model, "Model directory (default: $SLUICE_MODEL or the shipped sluice-k3-mini)");
  cmd->add_option("--system", o->system, "System message");
  cmd->add_option("--max-new", o->gen.max_new, "Maximum tokens per reply")->capture_default_str();
  add_generation_options(cmd, o->gen);
  add_memory_options(cmd, o->mem);
  cmd->callback([o, &action] {
    action = [o] {
      check_generation_options(o->gen);
      apply_memory_options(o->mem);
      const std::string dir = model_or_default(o->model);
      auto model = Engine::open(dir, o->mem);
      print_plan(o->gen, *model);
      auto tok = text::Tokenizer::load(dir);
      make_drafter(o->gen, *model);
      auto tmpl = text::ChatTemplate::load(dir);
      nlohmann::json messages = nlohmann::json::array();
      if (!o->system.empty()) messages.push_back({{"role", "system"}, {"content", o->system}});
      auto session = std::make_unique<Session>(*model);
      const bool tty = isatty(STDIN_FILENO);
      std::string line;
      for (;;) {
        if (tty) std::fputs("> ", stdout), std::fflush(stdout);
        if (!std::getline(std::cin, line) || line == "/exit") break;
        if (line.empty()) continue;
        messages.push_back({{"role", "user"}, {"content", line}});
        std::vector<int32_t> ids = encode_prompt(*tok, *model, tmpl.render(messages, nullptr, true));
        // Reuse the cache when the conversation so far is a prefix of the new prompt.
        const auto& have = session->tokens();
        std::vector<int32_t> todo;
        if (have.size() < ids.size() && std::equal(have.begin(), have.end(), ids.begin())) {
          todo.assign(ids.begin() + long(have.size()), ids.end());
        } else {
          session = std::make_unique<Session>(*model);
          todo = ids;
        }
        std::vector<int32_t> reply = stream_text(*session, *tok, todo, o->gen, stdout);
        std::fputc('\n', stdout);
        messages.push_back({{"role", "assistant"}, {"content", tok->decode(reply)}});
      }
      return 0;
    };
  });
}

}  // namespace
SLUICE_COMMAND(6, add_chat_command);

}  // namespace sluice::cli
