// The prepared-store manifest written by `sluice prepare` next to a
// checkpoint (sluice-manifest.json): the spine file, the shard sizes it was
// made from, and every routed expert's extents and XXH3-64 checksum; also the
// XXH3-64 of each shard's bytes outside the experts and of the spine file, so
// that `sluice verify` covers every byte (store/file_checksum.h). Manifests
// written before those two existed load without them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/extent.h"

namespace sluice {

inline constexpr const char* kManifestFile = "sluice-manifest.json";
inline constexpr const char* kSpineFile = "sluice-spine.safetensors";

// Bounds a manifest's expert coordinates are checked against when it is read (the
// largest models have 61-93 layers and 384-896 routed experts).
inline constexpr int32_t kMaxManifestLayers = 1 << 12;
inline constexpr int32_t kMaxManifestExperts = 1 << 16;

struct ManifestExpert {
  int32_t layer = 0, expert = 0;
  std::vector<ExpertExtent> extents;  // file indices refer to Manifest::files
  uint64_t checksum = 0;
};

struct Manifest {
  int version = 1;
  std::string spine_format;  // bf16 (as released) or int8
  std::vector<std::pair<std::string, uint64_t>> files;  // shard name, size in bytes
  std::vector<ManifestExpert> experts;
  std::vector<std::string> packs;  // expert pack files (prepare --pack-experts), in checkpoint file order
  // Per entry of `files` (or empty): XXH3-64 of the file's bytes outside every expert extent.
  std::vector<uint64_t> rest_checksums;
  struct SpineFile {
    uint64_t size = 0, checksum = 0;
  };
  std::optional<SpineFile> spine_file;  // kSpineFile when it is not one of `files` (it is with packs)
  // prepare --expert-dirs: the directories (drives) the packs are spread over,
  // absolute paths, and for each entry of `packs` the index of its directory.
  // Both empty: every pack is next to the checkpoint.
  std::vector<std::string> expert_dirs;
  std::vector<int32_t> pack_dirs;

  // Where `packs[p]` is: in its expert directory, or in `model_dir`.
  std::string pack_path(const std::string& model_dir, size_t p) const;
  // Where `files[i]` is (packs as pack_path, everything else in `model_dir`).
  std::string file_path(const std::string& model_dir, size_t i) const;

  void save(const std::string& path) const;  // atomic (temp file + rename)
  static Manifest load(const std::string& path);
  // layer -> expert -> checksum, for StreamingOptions::checksums.
  std::vector<std::vector<uint64_t>> checksum_table() const;
};

// The manifest in `dir`, if `sluice prepare` has been run there (or a stream-mode
// pull fetched the repository's). Checkpoint loads it once; prefer checkpoint.manifest().
std::optional<Manifest> find_manifest(const std::string& dir);

}  // namespace sluice
