// Fuzz target: the JSON-object prefix recogniser behind response_format
// json_object, against nlohmann::json: a text it calls complete must parse as one
// object, and it must take every byte of a text that parses as one object.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/json_prefix.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  sluice::chat::JsonPrefix p;
  size_t accepted = 0;
  // Byte by byte on a copy, as the server tries a candidate token.
  for (; accepted < text.size(); ++accepted) {
    sluice::chat::JsonPrefix trial = p;
    if (!trial.feed(std::string_view(text).substr(accepted, 1))) break;
    p = trial;
  }
  if (p.complete()) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text.substr(0, accepted));
    } catch (const nlohmann::json::out_of_range&) {
      return 0;  // a number beyond double's range: valid JSON (RFC 8259 sets no limit), refused by nlohmann
    } catch (const nlohmann::json::exception&) {
      __builtin_trap();  // called complete, but not JSON
    }
    if (!j.is_object()) __builtin_trap();
  }
  bool object = false;
  // nlohmann::json ends its input at a NUL byte, which RFC 8259 (and the recogniser) do not.
  if (text.find('\0') != std::string::npos) return 0;
  try {
    object = nlohmann::json::parse(text).is_object();
  } catch (const nlohmann::json::exception&) {
  }
  if (object && !(accepted == text.size() && p.complete())) __builtin_trap();  // refused a valid object
  return 0;
}
