// generation_config.json: further end-of-sequence ids (e.g. end-of-turn and
// end-of-text) beside config.json's eos_token_id.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

// eos_token_id of DIR/generation_config.json (an id or a list of ids); empty
// when the file is absent or has none. Invalid JSON is an error naming the file.
std::vector<int32_t> generation_eos_ids(const std::string& dir);

}  // namespace sluice
