// sluice generate: greedy continuation of a token prompt.
#include <cstdio>

#include "cli/commands.h"
#include "model/model.h"
#include "runtime/session.h"
#include "util/error.h"

namespace sluice::cli {

namespace {
void add_generate_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("generate", "Greedy generation; prints the new token ids as a JSON array");
  struct Opts {
    std::string model, tokens;
    int64_t max_new = 16;
    bool ignore_eos = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "Model directory")->required();
  cmd->add_option("--tokens", o->tokens, "Prompt as comma-separated token ids")->required();
  cmd->add_option("--max-new", o->max_new, "Maximum number of tokens to generate")->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating after an end-of-sequence token");
  cmd->callback([o, &action] {
    action = [o] {
      std::vector<int32_t> prompt = parse_token_list(o->tokens);
      if (o->max_new < 0) fail("--max-new must be >= 0, got {}", o->max_new);
      auto model = load_model(o->model);
      Session s(*model);
      auto ids = generate_greedy(s, prompt, o->max_new, o->ignore_eos);
      std::string line = "[";
      for (size_t i = 0; i < ids.size(); ++i) line += (i ? "," : "") + std::to_string(ids[i]);
      std::printf("%s]\n", line.c_str());
      return 0;
    };
  });
}

}  // namespace
SLUICE_COMMAND(10, add_generate_command);

}  // namespace sluice::cli
