// generation_config.json: further end-of-sequence ids (e.g. end-of-turn and
// end-of-text) beside config.json's eos_token_id, and the model's recommended
// sampling settings.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sluice {

// eos_token_id of DIR/generation_config.json (an id or a list of ids); empty
// when the file is absent or has none. Invalid JSON is an error naming the file.
std::vector<int32_t> generation_eos_ids(const std::string& dir);

// The sampling fields of DIR/generation_config.json as written (nullopt: the
// file is absent). Fields of the wrong type or out of range are an error
// naming the file and field.
struct GenerationDefaults {
  std::optional<bool> do_sample;
  std::optional<double> temperature, top_p, min_p;
  std::optional<int64_t> top_k;
};
std::optional<GenerationDefaults> generation_defaults(const std::string& dir);

}  // namespace sluice
