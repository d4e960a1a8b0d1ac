#include "text/text_support.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace sluice::test {

namespace {
std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  return q + "'";
}
}  // namespace

std::string source_dir() { return SLUICE_SOURCE_DIR; }
std::string node_modules(const std::string& rel) { return source_dir() + "/tests/node/node_modules/" + rel; }

int run_node(const std::string& script, const std::vector<std::string>& args, const std::string& out_file) {
  std::string cmd = "node " + quote(source_dir() + "/tests/node/" + script);
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " > " + quote(out_file);
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

void write_file(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out << data;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace sluice::test
