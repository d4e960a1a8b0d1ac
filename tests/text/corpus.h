// Deterministic text corpus for tokenizer tests (seeded; no stored outputs).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::test {

struct CorpusOptions {
  uint64_t seed = 20261130;
  size_t per_kind = 185;   // strings per generator kind
  size_t big_docs = 3;     // ~100 KB documents
  size_t big_doc_bytes = 100 * 1024;
  // Extra strings that should be recognised as special/added tokens.
  std::vector<std::string> specials;
};

// Random code points are drawn from every plane that has assigned characters
// (0-3, 14-16; planes 4-13 are entirely unassigned) and are kept only if the
// Unicode tables in use (PCRE2's) class them as assigned, so the tokenizers'
// and the references' differing Unicode versions do not decide the result.
std::vector<std::string> make_corpus(const CorpusOptions& o);

}  // namespace sluice::test
