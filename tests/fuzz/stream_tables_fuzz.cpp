// Fuzz target: the JSON tables of prepared and stream-mode directories. The
// first byte picks sluice-manifest.json (Manifest::load), sluice-expert-cache.json
// (ExpertDiskCache) or sluice-remote.json (RemoteRepo::load); each must parse,
// report an error (sluice::Error), or, for the cache table, be treated as empty.
#include <cstdint>
#include <string>

#include "fuzz_files.h"
#include "experts/expert_disk_cache.h"
#include "format/manifest.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string dir = sluice::fuzz::scratch_dir();
  try {
    switch (data[0] % 3) {
      case 0: {
        const auto m = sluice::Manifest::load(sluice::fuzz::write_input(sluice::kManifestFile, data + 1, size - 1));
        (void)m.checksum_table();
        for (size_t i = 0; i < m.files.size(); ++i) (void)m.file_path(dir, i);  // packs on expert_dirs
        break;
      }
      case 1: {
        sluice::fuzz::write_input(sluice::kExpertCacheFile, data + 1, size - 1);
        sluice::ExpertDiskCache c(dir);
        uint64_t sum = 0;
        for (const auto& [k, e] : c.entries()) sum += e.bytes;
        if (sum != c.bytes()) __builtin_trap();  // the table's total is its entries'
        break;
      }
      default:
        sluice::fuzz::write_input(sluice::kRemoteFile, data + 1, size - 1);
        (void)sluice::RemoteRepo::load(dir).file_url("model.safetensors");
    }
  } catch (const sluice::Error&) {
  }
  return 0;
}
