// `sluice verify`: a prepared checkpoint against its manifest (sluice-manifest.json):
// every shard has the size recorded when it was prepared, every routed expert's
// bytes still have the XXH3-64 recorded then, and so do each shard's other bytes
// (header, spine tensors) and the prepared spine file. Reads every byte once.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

struct VerifyReport {
  int64_t files = 0, experts = 0;
  uint64_t bytes = 0;                 // expert bytes hashed
  uint64_t spine_bytes = 0;           // other bytes hashed (shard headers and spine, the spine file)
  std::vector<std::string> problems;  // one line each, naming the file or the expert
  std::vector<std::string> unchecked;  // what the manifest has no checksum for (an older prepare)
  bool ok() const { return problems.empty(); }
};

// Throws when DIR has no manifest (or is a stream-mode directory, whose experts
// may be absent: `sluice cache verify` checks those).
VerifyReport verify_checkpoint(const std::string& dir, bool progress);

}  // namespace sluice
