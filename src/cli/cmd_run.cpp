// sluice run: complete a text prompt with a model (the shipped sluice-k3-mini
// unless --model is given), streaming the text.
#include <cstdio>

#include "cli/commands.h"
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
    double ram_gb = 0;
  };
  auto o = std::make_shared<Opts>();
  o->gen.max_new = 64;
  cmd->add_option("prompt", o->prompt, "Prompt text")->required();
  cmd->add_option("--model", o->model, "Model directory (default: $SLUICE_MODEL or the shipped sluice-k3-mini)");
  cmd->add_option("--max-new", o->gen.max_new, "Maximum number of tokens to generate")->capture_default_str();
  cmd->add_option("--ram", o->ram_gb, "Stream routed experts within this many GB (default: all in RAM)");
  add_generation_options(cmd, o->gen);
  cmd->callback([o, &action] {
    action = [o] {
      check_generation_options(o->gen);
      const std::string dir = model_or_default(o->model);
      LoadOptions lo;
      if (o->ram_gb > 0) {
        lo.stream_experts = true;
        lo.prefetch = true;
        lo.streaming.cache_bytes = uint64_t(o->ram_gb * 1e9);
      }
      auto model = load_model(dir, lo);
      auto tok = text::Tokenizer::load(dir);
      auto prompt = encode_prompt(*tok, *model, o->prompt);
      make_drafter(o->gen, *model);
      Session s(*model);
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
