// Helpers for the text suite: paths of the node reference packages and
// running the node reference scripts.
#pragma once
#include <string>
#include <vector>

namespace sluice::test {

std::string source_dir();                       // repository root
std::string node_modules(const std::string& rel);  // tests/node/node_modules/<rel>
// Runs `node tests/node/<script> args...`, stdout to `out_file`; returns the exit status.
int run_node(const std::string& script, const std::vector<std::string>& args, const std::string& out_file);
std::vector<std::string> read_lines(const std::string& path);
void write_file(const std::string& path, const std::string& data);
std::string read_file(const std::string& path);

}  // namespace sluice::test
