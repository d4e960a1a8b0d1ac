// `sluice verify`: a prepared checkpoint against its manifest (sluice-manifest.json):
// every shard has the size recorded when it was prepared, and every routed
// expert's bytes still have the XXH3-64 recorded then. Reads each expert once.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

struct VerifyReport {
  int64_t files = 0, experts = 0;
  uint64_t bytes = 0;                 // expert bytes hashed
  std::vector<std::string> problems;  // one line each, naming the file or the expert
  bool ok() const { return problems.empty(); }
};

// Throws when DIR has no manifest (or is a stream-mode directory, whose experts
// may be absent: `sluice cache verify` checks those).
VerifyReport verify_checkpoint(const std::string& dir, bool progress);

}  // namespace sluice
