// Fuzz target: JSON Schemas compiled to output grammars, and text fed to them.
// Input: a schema (JSON), a NUL byte, then text. A schema is compiled or refused
// with a 400 (never another exception or a crash); text the grammar accepts as
// complete always parses as JSON (what response_format json_schema promises).
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/api_error.h"
#include "chat/output_grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  if (nul == std::string_view::npos) return 0;
  const nlohmann::json schema = nlohmann::json::parse(in.substr(0, nul), nullptr, false);
  if (schema.is_discarded()) return 0;
  std::shared_ptr<const sluice::chat::Grammar> g;
  try {
    g = sluice::chat::json_schema_grammar(schema, "schema");
  } catch (const sluice::chat::ApiError& e) {
    if (e.status() != 400 || e.param().empty()) __builtin_trap();
    return 0;
  }
  sluice::chat::GrammarCursor c(g);
  const std::string_view text = in.substr(nul + 1);
  for (size_t i = 0; i < text.size(); ++i) {
    if (!c.feed(text.substr(i, 1))) return 0;
    if (c.complete() && nlohmann::json::parse(text.substr(0, i + 1), nullptr, false).is_discarded()) __builtin_trap();
  }
  return 0;
}
