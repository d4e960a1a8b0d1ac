// Subcommands of the sluice binary. Each command lives in its own cmd_*.cpp and
// registers itself with SLUICE_COMMAND, so adding a command touches no other file.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace sluice::cli {

// The action chosen on the command line; set by the subcommand's callback.
using Action = std::function<int()>;
using CommandSetup = void (*)(CLI::App& app, Action& action);

// Registers a subcommand; `order` sorts the --help listing.
struct CommandRegistrar {
  CommandRegistrar(int order, CommandSetup setup);
};
std::vector<std::pair<int, CommandSetup>>& command_registry();

// "5,17,9" -> {5, 17, 9}; throws sluice::Error naming the bad item.
std::vector<int32_t> parse_token_list(const std::string& s);
// --model when the user gave none: $SLUICE_MODEL, else the shipped sluice-k3-mini.
std::string default_model_dir();
// A given directory is checked (format/model_dir.h): a model's, or with
// `weights` false only that it is a directory (tokenize reads only the tokenizer).
std::string model_or_default(const std::string& given, bool weights = true);

// Token ids from FILE:TENSOR, an integer tensor (e.g. a reference's input_ids).
std::vector<int32_t> tokens_from_safetensors(const std::string& spec);

}  // namespace sluice::cli

#define SLUICE_COMMAND_CAT2(a, b) a##b
#define SLUICE_COMMAND_CAT(a, b) SLUICE_COMMAND_CAT2(a, b)
// __COUNTER__, not __LINE__: the unity build compiles several command files in one translation
// unit, where two registrations on the same line number would clash.
#define SLUICE_COMMAND(order, fn) \
  static ::sluice::cli::CommandRegistrar SLUICE_COMMAND_CAT(sluice_command_, __COUNTER__)(order, fn)
