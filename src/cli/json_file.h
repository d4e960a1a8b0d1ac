// Writing a command's --json result: the one place that opens the file and
// reports a failed open or write naming it.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace sluice::cli {

// Writes j (indented, newline-terminated) to path; nothing when path is empty.
void write_json_file(const std::string& path, const nlohmann::json& j);

}  // namespace sluice::cli
