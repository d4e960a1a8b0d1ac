// sluice bench: decode speed and I/O of a model with experts streamed from
// storage under a memory budget (bench/benchmark.h). Prints a one-line
// summary per measurement, progress on stderr, and writes the JSON.
#include <cstdio>
#include <fstream>

#include "cli/bench_kernels.h"
#include "cli/json_file.h"
#include "cli/commands.h"
#include "cli/memory_options.h"
#include "bench/benchmark.h"
#include "engine/drafter.h"
#include "util/error.h"

namespace sluice::cli {
namespace {

struct BenchOpts {
  BenchRequest r;
  std::string json_out, prompt_from, prompt_file;
  bool kernels = false;
};

int run_bench(BenchOpts& o) {
  o.r.model = model_or_default(o.r.model);
  apply_memory_options(o.r.mem);
  if (!o.prompt_from.empty()) o.r.prompt = tokens_from_safetensors(o.prompt_from);
  if (!o.prompt_file.empty()) {
    std::ifstream in(o.prompt_file, std::ios::binary);
    if (!in) fail("{}: cannot read the prompt file", o.prompt_file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // The model's tokenizer, or bytes as ids 0-255 for a model without tokenizer files (the byte-level codec).
    o.r.prompt = model_token_text(o.r.model, 256)->encode(text);
    if (o.r.prompt.empty()) fail("{}: the prompt encodes to no tokens", o.prompt_file);
  }
  const BenchResult res = run_benchmark(o.r, [](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  });
  for (const auto& line : res.summary) std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  write_json_file(o.json_out, res.json);
  return 0;
}

// --generate, --speculate and the drafters they time.
void add_generation_bench_options(CLI::App* cmd, BenchRequest& r) {
  cmd->add_flag("--generate", r.generate,
                "Time greedy generation as a whole (means per generated token, forward passes, expert bytes); "
                "the baseline for --speculate");
  cmd->add_flag("--speculate", r.speculate, "As --generate, with n-gram speculative decoding (or --draft's)");
  cmd->add_option("--draft", r.draft, "With --speculate: ngram or suffix drafts (a suffix index of the text so far)")
      ->check(CLI::IsMember({"ngram", "suffix"}))
      ->capture_default_str();
  cmd->add_option("--draft-max", r.draft_max, "Most draft tokens verified per pass")->capture_default_str();
  cmd->add_flag("--no-draft-gate", r.no_draft_gate,
                "Draft --draft-max tokens at every step, whether or not it pays (measuring a drafter)");
  cmd->add_option("--replay-drafts", r.replay_wrong_every,
                  "Plain generation, then speculation whose drafts are that run's own tokens with every K-th one "
                  "wrong (0: none): what speculation gains or costs at a known acceptance, e.g. on random weights");
  cmd->add_option("--replay-acceptance", r.replay_acceptance,
                  "As --replay-drafts, with each drafted token right with probability A (seeded by --seed): the "
                  "gate's acceptance, e.g. 0.3, 0.5, 0.7, 0.9")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--draft-model", r.draft_model,
                  "Plain generation, then speculation with this draft model's greedy drafts (each on a freshly "
                  "opened target): tokens/s of both. A draft model with another tokenizer drafts through text");
  cmd->add_flag("--draft-retokenize", r.draft_retokenize,
                "With --draft-model: draft through text even when it has the target's tokenizer");
}

void add_bench_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("bench", "Measure decoding with routed experts streamed from disk under a memory budget");
  auto o = std::make_shared<BenchOpts>();
  BenchRequest& r = o->r;
  auto* model =
      cmd->add_option("--model", r.model, "Model directory (default: $SLUICE_MODEL or the shipped sluice-k3-mini)");
  cmd->add_option("--tokens", r.tokens, "Decode steps to time")->capture_default_str();
  cmd->add_option("--prompt-tokens", r.prompt_tokens, "Random prompt length (prefilled first)")->capture_default_str();
  cmd->add_option("--probe-seconds", r.probe_seconds,
                  "Before the decode, read random experts of the same files for this long (no compute, no "
                  "verification) to measure the drive's rate: the floor and the stalled reads' share of it (0: no "
                  "probe)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", r.chunk,
                  "Prefill chunk size in tokens (0: as many as the memory plan's activation reserve allows; each "
                  "chunk reads each routed expert it needs once per layer)")
      ->capture_default_str();
  add_prefill_span_option(cmd, r.span);
  cmd->add_option("--batch", r.batch,
                  "Decode this many sequences together (each its own random prompt, prefilled alone first): one "
                  "forward pass per step for all; aggregate tokens/s and bytes read per generated token")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--json", o->json_out, "Write the full results (with per-token lists) here");
  cmd->add_option("--trace", r.trace,
                  "Decode: write a Chrome / Perfetto trace of the timed steps here (each expert's read from issue "
                  "to completion, waits, checksums, MoE compute per layer, tokens)");
  cmd->add_option("--seed", r.seed, "Seed of the random prompt")->capture_default_str();
  auto* rt = cmd->add_option(
      "--routing-trace", r.routing_trace,
      "BENCHMARK ONLY: every MoE layer's experts replayed from FILE (`sluice routing-report --json` on a real model: "
      "its \"routes\", cycling) instead of the model's router; the tokens are not the model's, the output says so");
  cmd->add_option("--routing-synthetic", r.routing_synthetic,
                  "BENCHMARK ONLY: every MoE layer's experts drawn by a seeded generator with these statistics, "
                  "e.g. overlap=0.31,hot=0.86,next_layer=0.5[,seed=N] (k3: those) instead of the model's router; the "
                  "tokens are not the model's, the output says so")
      ->excludes(rt);
  cmd->add_flag("--io-only", r.io_only, "Only read experts (random top-k per layer and token), no compute");
  add_generation_bench_options(cmd, r);
  auto* pf = cmd->add_option("--prompt-from", o->prompt_from, "Prompt token ids from FILE:TENSOR instead of random ids");
  cmd->add_option("--prompt-file", o->prompt_file, "Prompt text from FILE, encoded with the model's tokenizer (bytes as ids 0-255 without tokenizer files)")
      ->excludes(pf);
  cmd->add_option("--repeat-prompt", r.repeat_prompt, "Repeat the prompt this many times (copy-heavy input)")
      ->capture_default_str();
  add_memory_options(cmd, r.mem);
  auto* ram = cmd->get_option("--ram")->description(
      "Memory budget in GiB for spine, expert cache, state and scratch; routed experts are streamed from disk "
      "within it, and the spine too when it does not fit (required unless --kernels)");
  cmd->add_flag("--kernels", o->kernels,
                "Measure the compute kernels alone (no model): DRAM read bandwidth, every weight format's matvec "
                "(7168 x 16384) and 16/64-token products against the ISA's peak; with --device cuda[:N], the GPU's "
                "products instead (device copy bandwidth, the tensor-core peak, matvec, eight K2-shaped experts in one "
                "grouped call, 16/64/512-token products, on the tensor cores and on the CUDA cores); --json writes them")
      ->excludes(model)
      ->excludes(ram);
  cmd->callback([o, ram, &action] {
    if (o->kernels) {
      action = [o] {
        apply_memory_options(o->r.mem);
        // The GPU's products only when asked for by name: `auto` keeps the CPU figures issue-comparable.
        const Device d = parse_device(o->r.mem.device);
        if (d.cuda() && o->r.mem.device != "auto") return run_gpu_kernels_bench(d.index, o->json_out);
        return run_kernels_bench(o->json_out);
      };
      return;
    }
    if (ram->count() == 0) throw CLI::RequiredError("--ram");
    action = [o] { return run_bench(*o); };
  });
}

}  // namespace
SLUICE_COMMAND(50, add_bench_command);

}  // namespace sluice::cli
