// sluice serve: the OpenAI-compatible HTTP server.
#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

#include "chat/chat_codec.h"
#include "cli/commands.h"
#include "cluster/cluster.h"
#include "cluster/session_followers.h"
#include "cli/memory_options.h"
#include "cli/text_generation.h"
#include "engine/drafter.h"
#include "engine/engine.h"
#include "engine/model_identity.h"
#include "runtime/retokenizing_drafter.h"
#include "server/http_server.h"
#include "server/api_request.h"
#include "server/stop_signals.h"
#include "util/checked_number.h"
#include "util/error.h"
#include "util/progress.h"

namespace sluice::cli {

namespace {

// The first lines of serve's output say what context is served and why.
std::string context_line(const MemoryPlan& plan, bool fitted) {
  const ModelFootprint& f = plan.footprint;
  if (!fitted)
    return fmt::format("sluice: context {} positions per conversation (--context-length)", f.context_tokens);
  const std::string seqs = f.sequences > 1 ? fmt::format(" in each of {} sequences", f.sequences) : std::string();
  return fmt::format(
      "sluice: context {} positions per conversation (default: the largest whose state, {} per position{}, fits in "
      "the memory the weights leave, at most the model's {}; --context-length N sets another)",
      f.context_tokens, binary_bytes(f.state_bytes_per_token), seqs, f.context_max);
}

struct ServeOptions {
  std::string model, name;
  DraftChoice draft;
  MemoryRequest mem;
  bool speculate = false;
  bool no_draft_gate = false;
  int64_t context = 0;
  double header_timeout_s = 10;
  double request_timeout_s = 0;
  double prefill_slice_s = -1;  // -1: as the plan suits
  double keep_alive_s = 5;
  bool no_request_log = false;
  double prompt_cache_gb = 8;
  double checkpoints_gb = 2;
  double replay_mib = 64;
  server::ServerOptions s;
};

void add_speculation_options(CLI::App* cmd, ServeOptions& o) {
  cmd->add_flag("--speculate", o.speculate,
                "Speculative decoding: drafts are verified in one pass (same replies, greedy or sampled); n-gram "
                "drafts unless --draft or --draft-model says otherwise. Per request, a gate measures acceptance and "
                "the cost of verification passes against plain steps and drafts only while that pays (/metrics "
                "reports it). Needs --parallel 1");
  cmd->add_option("--draft", o.draft.kind,
                  "Drafter (implies --speculate): ngram (what followed the longest recent match of the last --ngram "
                  "tokens in the conversation) or suffix (a suffix index of the conversation and of the recent "
                  "requests' prompts and replies, up to --suffix-tokens tokens, the oldest evicted first: the most "
                  "frequent continuation of the longest earlier match, as long as the match)")
      ->check(CLI::IsMember({"ngram", "suffix"}));
  add_draft_length_options(cmd, o.s.speculation.max_draft, o.no_draft_gate, o.draft);
  cmd->add_option("--draft-model", o.draft.model_dir,
                  "Speculate with this smaller model's greedy continuation instead (implies --speculate). With "
                  "another tokenizer than the target's it drafts through text: the conversation's text is tokenised "
                  "for it and its draft tokenised again with the target's tokenizer (a model without tokenizer "
                  "files reads ids 0-255 as bytes). K3's own drafters, DSpark (config model_type k3_dspark) and "
                  "EAGLE-3 with MLA (architectures Eagle3*), read the target's hidden states from its own passes "
                  "and borrow its embedding");
  cmd->add_flag("--draft-retokenize", o.draft.retokenize,
                "With --draft-model: draft through text even when the draft model has the target's tokenizer");
}

void add_timeout_options(CLI::App* cmd, ServeOptions& o) {
  cmd->add_option("--header-timeout", o.header_timeout_s,
                  "Seconds a client has to send a request's line and headers (and a small body); later: 408")
      ->capture_default_str();
  cmd->add_option("--request-timeout", o.request_timeout_s,
                  "Seconds a generation request may take from its arrival (waiting, prefill, decoding); past it "
                  "the work stops within a layer and the client gets a request_timeout error (0: no limit)")
      ->capture_default_str();
  cmd->add_option("--keep-alive", o.keep_alive_s,
                  "Seconds a streamed reply may go without a byte while it is queued or its prompt is prefilled "
                  "before a keep-alive is sent (SSE comment, Anthropic ping, Responses in_progress event)")
      ->capture_default_str();
  cmd->add_flag("--no-request-log", o.no_request_log,
                "Do not print a line per generation request (id, endpoint, prompt / cached / new tokens, queue wait, "
                "time to first token, tokens/s, finish reason)");
}

// Prefix reuse: conversations kept in memory, the state directory, checkpoints and replayed replies.
void add_prompt_cache_options(CLI::App* cmd, ServeOptions& o) {
  cmd->add_option("--cache-slots", o.s.cache.slots,
                  "Conversations kept in memory for prefix reuse (the longest shared prefix wins; least recently "
                  "used evicted first; with --ram the memory plan reserves state for each)")
      ->capture_default_str();
  cmd->add_option("--prompt-cache", o.s.cache.dir,
                  "Directory where each prompt's state is saved after prefill and found again, also after a "
                  "restart (files of another model, device or kernel set, or corrupt ones, are ignored)");
  cmd->add_option("--prompt-cache-max", o.prompt_cache_gb,
                  "With --prompt-cache: GB (10^9 bytes) its files may take; least recently used deleted first")
      ->capture_default_str();
  cmd->add_option("--prompt-checkpoints", o.checkpoints_gb,
                  "GB (10^9 bytes) of states kept in memory at message boundaries (the end of the system prompt and "
                  "tools, where prompts depart from each other), so a new session of an agent starts there; 0: none")
      ->capture_default_str();
  cmd->add_option("--replay-max", o.replay_mib,
                  "MiB of generated replies kept, each with the prompt it was generated from, so that a conversation "
                  "sent back with one of them (found by its tool-call ids, or its text, after the same messages) is "
                  "fed the tokens the model generated instead of the template's rendering of the client's copy "
                  "(re-serialized arguments, reasoning left out) and reuses the prefix kept from that turn; least "
                  "recently used forgotten first; 0: off")
      ->capture_default_str();
}

// The options' values checked and turned into the server's.
void check_serve_options(ServeOptions& o) {
  check_draft_choice(o.draft);
  o.draft.speculate = o.speculate;
  o.s.speculation.adaptive = !o.no_draft_gate;
  if (!(o.header_timeout_s > 0 && o.header_timeout_s <= 3600))
    fail("--header-timeout must be in (0, 3600] seconds, got {}", o.header_timeout_s);
  o.s.transport.head_timeout = std::chrono::milliseconds(checked_integer<int64_t>(o.header_timeout_s * 1000, "--header-timeout (ms)"));
  if (!(o.request_timeout_s >= 0 && o.request_timeout_s <= 1e6))
    fail("--request-timeout must be in [0, 1000000] seconds (0: no limit), got {}", o.request_timeout_s);
  o.s.request_timeout = std::chrono::milliseconds(checked_integer<int64_t>(o.request_timeout_s * 1000, "--request-timeout (ms)"));
  if (o.prefill_slice_s != -1 && !(o.prefill_slice_s >= 0 && o.prefill_slice_s <= 3600))
    fail("--prefill-slice must be in [0, 3600] seconds, got {}", o.prefill_slice_s);
  if (!(o.keep_alive_s >= 0.1 && o.keep_alive_s <= 3600))
    fail("--keep-alive must be in [0.1, 3600] seconds, got {}", o.keep_alive_s);
  o.s.keep_alive = std::chrono::milliseconds(checked_integer<int64_t>(o.keep_alive_s * 1000, "--keep-alive (ms)"));
  o.s.log_requests = !o.no_request_log;
  server::check_options(o.s, o.speculate || !o.draft.kind.empty() || !o.draft.model_dir.empty());
  if (!(o.prompt_cache_gb > 0)) fail("--prompt-cache-max must be positive, got {}", o.prompt_cache_gb);
  o.s.cache.disk_bytes = checked_bytes(o.prompt_cache_gb, 1e9, "--prompt-cache-max (GB)");
  if (!(o.checkpoints_gb >= 0)) fail("--prompt-checkpoints must be >= 0, got {}", o.checkpoints_gb);
  o.s.cache.checkpoint_bytes = checked_bytes(o.checkpoints_gb, 1e9, "--prompt-checkpoints (GB)");
  if (!(o.replay_mib >= 0)) fail("--replay-max must be >= 0, got {}", o.replay_mib);
  o.s.replay_bytes = checked_bytes(o.replay_mib, double(1 << 20), "--replay-max (MiB)");
}

int serve(ServeOptions& o) {
  // Under mpirun rank 0 serves and the other ranks follow its sessions (cluster/session_followers.h).
  Cluster* cluster = process_cluster();
  const bool several = cluster && cluster->ranks() > 1;
  if (several && !o.draft.model_dir.empty())
    fail("--draft-model does not run across the ranks of an mpirun job yet (its sessions are not mirrored); "
         "use --draft ngram or suffix, or start it without mpirun");
  check_serve_options(o);
  apply_memory_options(o.mem);
  // State for each kept conversation, and for each running request beyond the one that is among them.
  o.mem.sequences = std::max<int64_t>(o.mem.sequences, o.s.cache.slots + o.s.parallel - 1);
  o.model = model_or_default(o.model);
  o.s.model_name = server::served_model_name(o.name, o.model);
  const server::StopSignals stop_signals;  // before the engine starts its threads
  if (o.context > 0) o.mem.context_tokens = o.context;  // the plan's state is for the served context
  o.mem.fit_context = o.context == 0;  // else the largest context the memory holds
  const auto print_notice = o.mem.on_plan;
  o.mem.on_plan = [print_notice, fit = o.mem.fit_context](const MemoryPlan& plan) {
    if (print_notice) print_notice(plan);
    std::fprintf(stderr, "%s\n", context_line(plan, fit).c_str());
  };
  auto model = Engine::open(o.model, o.mem);
  if (model->plan().budget > 0) std::fprintf(stderr, "%s\n", model->plan().describe().c_str());
  const uint64_t others = model->plan().state / uint64_t(o.mem.sequences) * uint64_t(o.s.parallel - 1);
  if (model->plan().budget > 0) o.s.cache.memory_bytes = model->plan().state - others;  // for kept ones
  if (o.s.prefill_chunk == 0) o.s.prefill_chunk = model->prefill_chunk();
  o.s.prefill_slice_seconds = o.prefill_slice_s >= 0                                          ? o.prefill_slice_s
                               : model->plan().stream_experts || model->plan().device.cuda() ? 0.0
                                                                                              : 0.5;
  if (!o.s.cache.dir.empty()) o.s.cache.identity = model_identity(*model);
  o.s.drafter = choose_drafter(o.draft, *model);
  if (const auto* r = dynamic_cast<const RetokenizingDrafter*>(o.s.drafter.get()))
    std::fprintf(stderr, "sluice: draft model %s %s\n", o.draft.model_dir.c_str(), r->describe().c_str());
  o.s.context_length = server::served_context(
      o.context > 0 ? o.context : model->plan().footprint.context_tokens, model->context_length(), o.model);
  auto codec = chat::make_chat_codec(o.model, model->info().vocab);
  const MemoryPlan& plan = model->plan();
  o.s.page_card = {{"directory", o.model},
                    {"memory_plan", plan.to_json()},
                    {"memory_plan_text", plan.describe()},
                    {"memory_notice", plan.notice()}};
  o.s.sampling_defaults = server::sampling_defaults(o.model);
  // The other ranks have done what rank 0 did so far (and failed where it failed).
  if (several && cluster->rank() > 0) {
    follow_sessions(*cluster, {model.get()});
    return 0;
  }
  const auto mirror = several ? mirror_sessions(*cluster, {model.get()}) : nullptr;
  server::HttpServer srv(*model, *codec, o.s);
  const int port = srv.bind();
  std::fprintf(stderr, "sluice: serving '%s' (%s) on http://%s:%d (chat page at /)\n", o.s.model_name.c_str(),
               codec->describe().c_str(), o.s.host.c_str(), port);
  if (several)  // mpirun's own SIGTERM (or Ctrl-C) kills every rank at once, mid-reply
    std::fprintf(stderr, "sluice: rank 0 of %d serves as pid %d; SIGTERM to it finishes the running requests and "
                 "stops every rank\n", cluster->ranks(), int(getpid()));
  std::fflush(stderr);
  stop_signals.serve(srv);
  std::fprintf(stderr, "sluice: stopped\n");
  return 0;
}

void add_serve_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "serve", "OpenAI-compatible and Anthropic-compatible HTTP server (chat completions, completions, Responses, "
               "Messages) with a chat page at /");
  auto o = std::make_shared<ServeOptions>();
  cmd->add_option("--model", o->model, "Model directory (default: $SLUICE_MODEL or the shipped sluice-k3-mini)");
  cmd->add_option("--host", o->s.host, "Address to listen on (loopback by default)")->capture_default_str();
  cmd->add_option("--port", o->s.port, "Port to listen on (0: any free port, printed at start)")->capture_default_str();
  cmd->add_option("--api-key", o->s.api_key, "Require 'Authorization: Bearer KEY' on every request but /health");
  cmd->add_option("--max-request-bytes", o->s.max_request_bytes, "Larger request bodies get 413")
      ->capture_default_str();
  cmd->add_option("--max-queue", o->s.max_queue, "Requests that may wait for the running ones; more get 429")
      ->capture_default_str();
  cmd->add_option("--parallel", o->s.parallel,
                  "Requests decoded together, one forward pass for all (each reply the same as alone; with --ram the "
                  "plan holds state for each). A joining request's prompt is prefilled in slices between passes (one "
                  "slice of each prompt being prefilled per step, see --prefill-slice), so a request waits at most one "
                  "slice of each other prompt between two of its tokens, however long those prompts are")
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", o->s.prefill_chunk,
                  "Prompt tokens per prefill pass (0: as many as the memory plan allows)")->capture_default_str();
  add_prefill_span_option(cmd, o->s.prefill_span);
  cmd->add_option("--prefill-slice", o->prefill_slice_s,
                  "Seconds a prefill chunk should take: chunks are sized from the measured rate (at most "
                  "--prefill-chunk tokens), so a gone client, SIGTERM or the requests decoding beside a long prompt "
                  "wait about this long at most (default 0.5 with the weights in memory on the CPU; 0, the plan's "
                  "chunks, when experts are streamed (--ram) or on a GPU, where shorter chunks would read or copy "
                  "experts again)");
  cmd->add_option("--served-model-name", o->name, "Model id clients send (default: the directory's name)");
  add_speculation_options(cmd, *o);
  cmd->add_option("--context-length", o->context,
                  "Positions a conversation may use; longer prompts get 400 context_length_exceeded. Default: the "
                  "largest context whose KV / latent cache for each of --parallel (and --cache-slots) sequences "
                  "fits in the memory the weights leave (mapped: what is available less a margin, after every "
                  "weight and the reserve; with a --ram budget: half of what the reserve and spine leave, the "
                  "other half for the expert cache), a multiple of 1024, at least 4096 and at most the model's "
                  "max_position_embeddings; printed when the server starts. A given value is planned for (state "
                  "for that many positions) and refused when the memory cannot hold it");
  add_timeout_options(cmd, *o);
  cmd->add_option("--max-connections-per-client", o->s.transport.max_connections_per_client,
                  "Open connections one client address may hold; more get 429")
      ->capture_default_str();
  add_prompt_cache_options(cmd, *o);
  add_memory_options(cmd, o->mem);
  cmd->callback([o, &action] {
    action = [o] { return serve(*o); };
  });
}

}  // namespace
SLUICE_COMMAND(30, add_serve_command);

}  // namespace sluice::cli
