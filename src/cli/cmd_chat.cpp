// sluice chat: a conversation on the terminal through the conversation layer
// (src/chat: chat::ChatCodec renders with the model's template or K3's XTML,
// chat::Generator reuses the cached prefix and splits reasoning from the
// answer), so a turn here is rendered, reused and parsed exactly as by `serve`.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "chat/api_error.h"
#include "chat/chat_codec.h"
#include "chat/generator.h"
#include "cli/commands.h"
#include "cluster/cluster.h"
#include "cluster/session_followers.h"
#include "cli/memory_options.h"
#include "cli/text_generation.h"
#include "engine/engine.h"
#include "util/error.h"

namespace sluice::cli {
namespace {

struct ChatCommandOptions {
  std::string model, system, effort;
  bool hide_reasoning = false;
  TextGenOptions gen;
  MemoryRequest mem;
};

// Reads a message per line until /exit or the end of input, printing each reply
// as it is generated (its reasoning dimmed on a terminal, or hidden).
void converse(const ChatCommandOptions& o, chat::Generator& gen, const chat::ChatCodec& codec) {
  nlohmann::json messages = nlohmann::json::array();
  if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
  const bool tty = isatty(STDIN_FILENO), color = isatty(STDOUT_FILENO);
  std::string line;
  for (;;) {
    if (tty) std::fputs("> ", stdout), std::fflush(stdout);
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    chat::GenerationRequest req;  // tools off: a chat on the terminal calls nothing
    req.messages = messages;
    req.max_tokens = o.gen.max_new;
    req.sampling = o.gen.sampling;
    req.reasoning_effort = o.effort;
    std::string content, reasoning;
    bool in_reasoning = false;
    auto emit = [&](const chat::ReplyDelta& d, const std::vector<chat::LogprobEntry>&) {
      if (!d.reasoning.empty() && !o.hide_reasoning) {
        if (!in_reasoning && color) std::fputs("\x1b[2m", stdout);
        in_reasoning = true;
        std::fputs(d.reasoning.c_str(), stdout);
      }
      if (!d.content.empty()) {
        if (in_reasoning) std::fputs(color ? "\x1b[0m\n" : "\n", stdout);
        in_reasoning = false;
        std::fputs(d.content.c_str(), stdout);
      }
      std::fflush(stdout);
      reasoning += d.reasoning;
      content += d.content;
      return true;
    };
    try {
      const auto prompt = codec.render_chat(messages, nullptr, chat::ChatOptions{o.effort});
      const chat::Outcome out = gen.run(req, prompt, emit);
      if (in_reasoning && color) std::fputs("\x1b[0m", stdout);
      if (o.gen.stats)
        std::fprintf(stderr, "[prompt %lld tokens, %lld reused; reply %lld tokens, %s]\n",
                     (long long)out.prompt_tokens, (long long)out.cached_tokens, (long long)out.completion_tokens,
                     out.finish_reason.c_str());
    } catch (const chat::ApiError& e) {
      fail("{}", e.what());
    }
    std::fputc('\n', stdout);
    nlohmann::json reply = {{"role", "assistant"}, {"content", content}};
    if (!reasoning.empty()) reply["reasoning_content"] = reasoning;  // replayed, as K3 requires
    messages.push_back(std::move(reply));
  }
}

void add_chat_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("chat", "Chat on the terminal (one line per message; /exit or end of input quits)");
  auto o = std::make_shared<ChatCommandOptions>();
  o->gen.max_new = 256;
  cmd->add_option("--model", o->model, "Model directory (default: $SLUICE_MODEL or the shipped sluice-k3-mini)");
  cmd->add_option("--system", o->system, "System message");
  cmd->add_option("--max-new", o->gen.max_new, "Maximum tokens per reply")->capture_default_str();
  cmd->add_option("--reasoning-effort", o->effort, "none, low, medium, high or max (K3's thinking effort; a Jinja "
                                                   "template sees it as reasoning_effort)")
      ->check(CLI::IsMember({"none", "low", "medium", "high", "max"}));
  cmd->add_flag("--hide-reasoning", o->hide_reasoning, "Do not print the model's reasoning (shown dimmed otherwise)");
  add_generation_options(cmd, o->gen);
  add_memory_options(cmd, o->mem);
  cmd->callback([o, &action] {
    action = [o] {
      // Under mpirun rank 0 reads and prints; the other ranks follow its sessions (cluster/session_followers.h).
      Cluster* cluster = process_cluster();
      const bool several = cluster && cluster->ranks() > 1;
      if (several && !o->gen.draft.model_dir.empty())
        fail("--draft-model does not run across the ranks of an mpirun job yet (its sessions are not mirrored); "
             "use --draft ngram or suffix, or start it without mpirun");
      check_generation_options(o->gen);
      apply_memory_options(o->mem);
      const std::string dir = model_or_default(o->model);
      auto model = Engine::open(dir, o->mem);
      print_plan(o->gen, *model);
      make_drafter(o->gen, *model);
      auto codec = chat::make_chat_codec(dir, model->info().vocab);
      // The other ranks have done what rank 0 did so far (and failed where it failed).
      if (several && cluster->rank() > 0) {
        follow_sessions(*cluster, {model.get()});
        return 0;
      }
      const auto mirror = several ? mirror_sessions(*cluster, {model.get()}) : nullptr;
      chat::GenerationCounters counters;  // nothing reads them on the terminal
      SpeculationOptions spec;
      spec.max_draft = o->gen.draft_max;
      chat::Generator gen(*model, *codec, counters, model->context_length(), o->gen.drafter, spec, {},
                          o->gen.prefill_chunk > 0 ? o->gen.prefill_chunk : model->prefill_chunk(), 0,
                          o->gen.prefill_span);
      converse(*o, gen, *codec);
      return 0;
    };
  });
}

}  // namespace
SLUICE_COMMAND(6, add_chat_command);

}  // namespace sluice::cli
