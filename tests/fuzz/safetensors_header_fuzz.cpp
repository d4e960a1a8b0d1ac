// Fuzz target: the safetensors header parser on arbitrary bytes.
#include <cstdint>
#include <map>
#include <string>

#include "format/safetensors.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint64_t start = 0;
  std::map<std::string, std::string> meta;
  try {
    auto t = sluice::SafetensorsFile::parse_header(data, size, "fuzz", &start, &meta);
    for (const auto& [name, info] : t)
      if (info.end > size - start) __builtin_trap();  // accepted ranges must lie inside the input
  } catch (const sluice::Error&) {
  }
  return 0;
}
