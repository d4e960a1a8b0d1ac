// `sluice bench`: decode speed and I/O of a model with experts streamed from
// storage under a memory plan, as a library call that returns the results
// (JSON with per-token lists, and a one-line summary per measurement).
//
// Modes: decode (prefill a prompt, then time each greedy decode step), io-only
// (the expert reader alone on random top-k requests), generate / speculate
// (greedy generation timed as a whole, plain or n-gram speculative), and
// replayed drafts (a plain run, then speculation fed that run's own tokens
// with every K-th wrong, on a freshly opened model each), a draft model
// against plain generation (the same way; the draft model may have another
// tokenizer), and batched decode
// (B sequences with their own random prompts, prefilled one by one, then
// decoded together: one forward pass per step for all B).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/memory_plan.h"

namespace sluice {

struct BenchRequest {
  std::string model;
  MemoryRequest mem;  // mem.ram_gib > 0 is required
  int64_t tokens = 16, prompt_tokens = 16;
  int64_t chunk = 0;  // prefill chunk in tokens; 0: as many as the memory plan's reserve allows
  int64_t span = -1;  // prefill span in tokens (Session spans); -1: the plan's, 0: chunk by chunk
  uint64_t seed = 1;          // of the random prompt and the io-only requests
  std::vector<int32_t> prompt;  // when not empty, used instead of a random prompt
  int64_t repeat_prompt = 1;    // the prompt this many times (copy-heavy input)
  bool io_only = false, generate = false, speculate = false;
  std::string draft = "ngram";  // with speculate: ngram or suffix (runtime/suffix_drafter.h)
  int64_t draft_max = 8;
  bool no_draft_gate = false;  // draft draft_max tokens at every step (the gate off)
  int64_t replay_wrong_every = -1;  // >= 0: replayed-drafts mode
  double replay_acceptance = -1;    // >= 0: replayed drafts, each token right with this probability
  // Not empty: plain generation, then speculation with this draft model (its
  // own tokenizer or the target's; retokenize: through text either way).
  std::string draft_model;
  bool draft_retokenize = false;
  int64_t batch = 0;  // >= 1: batched decode of this many sequences, one forward pass per step
  // Decode: before the decode, the drive's rate on the same files is probed for
  // this long (the floor's I/O rate); 0: no probe.
  double probe_seconds = 3;
  // Decode: a Chrome / Perfetto trace of the decode steps (reads issued and
  // completed per expert, waits, checksums, MoE compute per layer) is written here.
  std::string trace;
  // Benchmark-only routing (experts/route_override.h), decode and batched decode: every MoE layer's
  // expert ids come from this `sluice routing-report --json` trace (replayed, cycling), or from a
  // seeded generator with these statistics ("overlap=0.31,hot=0.86,next_layer=0.5[,seed=N]"),
  // not from the model's router. The output says so on its first line and in "routing_override".
  std::string routing_trace, routing_synthetic;
};

struct BenchResult {
  nlohmann::json json;
  std::vector<std::string> summary;  // one line per measurement, for stdout
};

// Checks the request (errors name the option) and runs it; `progress` gets a
// line now and then (stderr in the CLI) so long runs are not silent.
BenchResult run_benchmark(const BenchRequest& r, const std::function<void(const std::string&)>& progress = {});

}  // namespace sluice
