// `sluice prepare`: the prepared store next to a checkpoint.
//  - sluice-spine.safetensors: every non-routed-expert tensor the model uses,
//    in one contiguous memory-mappable file, either as released (bf16/fp8) or
//    with 2-D weight matrices re-quantized to row-wise int8 (one f32 scale per
//    output row; routers, norms and small tensors stay as released).
//  - sluice-manifest.json: every routed expert's extents in the released
//    shards and the XXH3-64 of its bytes. Experts are never copied.
// Interrupted runs resume: the spine is only rewritten if missing or of another
// format, and checksums already computed are kept in a partial manifest.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

struct PrepareOptions {
  std::string dir;
  std::string spine = "bf16";  // bf16 (as released) | int8
  bool progress = true;
  // Copy routed experts into packs (sluice-experts-LLLLL.safetensors) where each
  // expert is one 4 KiB-aligned extent, for layouts that scatter an expert's tensors.
  bool pack_experts = false;
  // With pack_experts: spread the packs over these directories (drives), one
  // pack per layer and directory (experts/drive_placement.h); the manifest
  // records each directory's absolute path.
  std::vector<std::string> expert_dirs = {};
};

struct PrepareResult {
  uint64_t spine_bytes = 0, expert_bytes = 0;
  int64_t experts = 0, experts_resumed = 0;
  bool spine_reused = false;
  int64_t packs = 0;
};

PrepareResult prepare(const PrepareOptions& opts);

}  // namespace sluice
