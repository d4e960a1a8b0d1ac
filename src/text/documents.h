// Documents to score (sluice eval): a whole text file as one document, or a
// JSON-lines file with one document per line (a JSON string, or an object whose
// "text" is one). Each is encoded with encode(), as the reference tokenizers do
// with add_special_tokens=False. Errors name the file and, for JSON lines, the line.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace sluice::text {

std::vector<int32_t> read_text_document(const Tokenizer& tok, const std::string& path);
std::vector<std::vector<int32_t>> read_jsonl_documents(const Tokenizer& tok, const std::string& path);

}  // namespace sluice::text
