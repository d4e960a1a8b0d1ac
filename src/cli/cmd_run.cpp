// sluice run: complete a text prompt with a model (the shipped sluice-k3-mini
// unless --model is given), streaming the text.
#include <cstdio>

#include "cli/commands.h"
#include "cli/memory_options.h"
#include "cli/text_generation.h"
#include "engine/engine.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace sluice::cli {
namespace {

void add_run_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("run", "Complete a text prompt (default model: the shipped sluice-k3-mini)");
  struct Opts {
    std::string model, prompt;
    TextGenOptions gen;
    MemoryRequest mem;
  };
  auto o = std::make_shared<Opts>();
  o->gen.max_new = 64;
  cmd->add_option("prompt", o->prompt, "Prompt text")->required();
  cmd->add_option("--model", o->model, "Model directory (default: $SLUICE_MODEL or the shipped sluice-k3-mini)");
  cmd->add_option("--max-new", o->gen.max_new, "Maximum number of tokens to generate")->capture_default_str();
  add_generation_options(cmd, o->gen);
  add_memory_options(cmd, o->mem);
  cmd->callback([o, &action] {
    action = [o] {
      check_generation_options(o->gen);
      apply_memory_options(o->mem);
      const std::string dir = model_or_default(o->model);
      auto tok = text::Tokenizer::load(dir);
      auto prompt = encode_text(*tok, o->prompt);
      o->mem.context_tokens = int64_t(prompt.size()) + o->gen.max_new;
      auto model = Engine::open(dir, o->mem);
      check_prompt(*model, prompt);
      print_plan(o->gen, *model);
      make_drafter(o->gen, *model);
      Session s = model->session();
      std::fwrite(o->prompt.data(), 1, o->prompt.size(), stdout);
      stream_text(s, *tok, prompt, o->gen, stdout);
      std::fputc('\n', stdout);
      return 0;
    };
  });
}

}  // namespace
SLUICE_COMMAND(5, add_run_command);

}  // namespace sluice::cli
