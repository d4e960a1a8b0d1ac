// XXH3-64 over byte ranges of a file, read with pread (the page cache, not a
// mapping: a damaged or shortened file is an error naming the offset, not a
// SIGBUS). `sluice prepare` records, and `sluice verify` recomputes:
//   - each routed expert's extents (one checksum per expert),
//   - the rest of each checkpoint file: every byte outside all expert extents
//     (the safetensors header and the spine tensors as released), and
//   - the whole prepared spine file.
// Together they cover every byte the engine reads.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>


#include "format/extent.h"
#include "util/xxh3.h"

namespace sluice {

// The ranges of [0, file_size) that none of `extents` covers (those with file == `file`), in order.
std::vector<ExpertExtent> bytes_outside(const std::vector<ExpertExtent>& extents, int32_t file, uint64_t file_size);

// Adds [offset, offset + length) of the open file `fd` to `st`, reading through
// `buf`; `on_bytes` (optional) is told the bytes added by this call so far.
// Returns "" or why a read failed, naming the offset ("at offset N: <error>").
std::string xxh3_add_range(xxh3::State& st, int fd, uint64_t offset, uint64_t length, std::vector<uint8_t>& buf,
                           const std::function<void(uint64_t)>& on_bytes = {});

// XXH3-64 of the concatenated ranges of the file at `path`. `on_bytes` (optional)
// is told how many bytes were hashed so far. Throws sluice::Error naming the
// file and offset when it cannot be opened or ends early.
uint64_t xxh3_of_ranges(const std::string& path, const std::vector<ExpertExtent>& ranges,
                        const std::function<void(uint64_t)>& on_bytes = {});

}  // namespace sluice
