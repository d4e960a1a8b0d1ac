// The memory and streaming option group every command that opens a model
// shares (run, chat, generate, serve, bench, logits, routing-report), so the
// options mean the same everywhere: --ram is the whole budget in GiB
// (engine/memory_plan.h), the streaming knobs tune the expert reader.
#pragma once
#include <CLI/CLI.hpp>

#include "engine/memory_plan.h"

namespace sluice::cli {

void add_memory_options(CLI::App* cmd, MemoryRequest& r);
// The part of the group a plan needs (--ram, --threads, --device), for commands that only plan (info).
void add_plan_options(CLI::App* cmd, MemoryRequest& r);
// --prefill-span N for the commands that prefill prompts (run, chat, generate, serve, bench).
void add_prefill_span_option(CLI::App* cmd, int64_t& span);
// Checks the values (errors name the option) and sizes the thread pool; call before opening a model.
void apply_memory_options(const MemoryRequest& r);

}  // namespace sluice::cli
