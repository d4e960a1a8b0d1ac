// Free space checks before writing large files, so a command refuses up front
// instead of filling the disk half way.
#pragma once
#include <cstdint>
#include <string>

namespace sluice {

// Bytes available to this user on the filesystem holding `path` (or its
// nearest existing parent directory).
uint64_t free_disk_bytes(const std::string& path);
// Throws naming `what`, the path, the bytes needed and the bytes free when
// writing `bytes` more there would leave less than a small margin.
void require_free_disk(const std::string& path, uint64_t bytes, const std::string& what);

}  // namespace sluice
