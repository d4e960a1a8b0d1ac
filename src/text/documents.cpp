#include "text/documents.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace sluice::text {

std::vector<int32_t> read_text_document(const Tokenizer& tok, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return tok.encode(ss.str());
}

std::vector<std::vector<int32_t>> read_jsonl_documents(const Tokenizer& tok, const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open", path);
  std::vector<std::vector<int32_t>> docs;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("{}:{}: not JSON: {}", path, n, e.what());
    }
    if (j.is_object() && j.contains("text")) j = j["text"];
    if (!j.is_string()) fail("{}:{}: expected a JSON string or an object with a \"text\" string", path, n);
    docs.push_back(tok.encode(j.get<std::string>()));
  }
  if (docs.empty()) fail("{}: no documents", path);
  return docs;
}

}  // namespace sluice::text
