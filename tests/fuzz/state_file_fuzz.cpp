// Fuzz target: the session state file parser (runtime/state_file.h). Each
// input is parsed as it is, then again with its checksum made to match (so
// mutations reach the structure behind it); what parses is restored into a
// session of the golden model its identity names (qwen3_moe_tiny, or
// kimi_linear_tiny for recurrent state) and must then feed a token. Parsing
// and restoring must succeed or throw sluice::Error.
#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "runtime/session.h"
#include "runtime/state_file.h"
#include "util/error.h"

namespace {
const sluice::Model& model(bool recurrent) {
  static const std::unique_ptr<sluice::Engine> gqa = sluice::load_model(std::string(SLUICE_FIXTURES) + "/golden/qwen3_moe_tiny");
  static const std::unique_ptr<sluice::Engine> kda =
      sluice::load_model(std::string(SLUICE_FIXTURES) + "/golden/kimi_linear_tiny");
  return recurrent ? *kda : *gqa;
}

void parse_and_restore(const std::vector<uint8_t>& bytes) {
  try {
    sluice::DecodedState d = sluice::decode_state(bytes, "fuzz");
    sluice::Session s(model(d.identity.rfind("kimi_linear", 0) == 0));
    s.feed({1});
    const int64_t n = d.image.positions();
    s.restore(d.image, d.image.usable_prefix(n > 1 ? n - 1 : n));
    if (s.position() < 16) s.feed({2});
  } catch (const sluice::Error&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> b(data, data + size);
  parse_and_restore(b);
  if (b.size() >= 8) {
    const uint64_t sum = XXH3_64bits(b.data(), b.size() - 8);
    std::memcpy(b.data() + b.size() - 8, &sum, 8);
    parse_and_restore(b);
  }
  return 0;
}
