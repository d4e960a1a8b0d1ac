// `sluice pull`: download a checkpoint from a Hugging Face style repository
// (<base>/<repo>/resolve/<revision>/<file>).
//
//  --full    every shard, byte for byte.
//  --stream  every shard as a sparse file of its full size holding the
//            safetensors header and every tensor the model uses that is not a
//            routed expert (the spine); routed experts stay holes and are
//            fetched on first use at run time (experts/remote_experts.h). The
//            directory gets sluice-remote.json (where to fetch from) and an
//            empty presence table.
//
// Shards are built in DIR/.sluice-pull/ by range requests of at most a few MiB,
// several in flight. Each finished range is fsynced and recorded in the shard's
// state file, so an interrupted pull resumes without fetching finished bytes
// again. Sizes come from the server's Content-Range and are checked; a shard is
// renamed into DIR only when complete. Small files are written atomically.
// When the repository publishes sluice-manifest.json (a mirror that ran
// `sluice prepare`) it is downloaded, and a full pull checks every routed
// expert against its XXH3-64; stream mode checks each expert as it is fetched.
//
// Which tensors are the spine (stream mode), in this order:
//  1. headers of every shard (8-byte length, then the JSON), shards created sparse;
//  2. every tensor whose name has no ".experts." component, plus every tensor of
//     at most 256 bytes (e.g. INT4 weight_shape, which builders validate);
//  3. the expert index (format/expert_index.h: the builders' naming rules over
//     the headers) gives the routed experts' extents and the spine tensors;
//  4. every spine tensor not inside a routed expert's extents and not yet
//     fetched (e.g. gpt-oss expert biases, which live under ".experts." but are spine).
#pragma once
#include <cstdint>
#include <string>

#include "experts/expert_disk_cache.h"

namespace sluice {

struct PullOptions {
  std::string source;    // "org/name" or "https://host/org/name"
  std::string dir;
  std::string revision = "main";
  std::string base;      // default: $SLUICE_HF_BASE or https://huggingface.co
  bool stream = false;
  int parallel = 4;
  uint64_t chunk_bytes = 8ull << 20;
  uint64_t cache_max_bytes = 0;  // stream: bound recorded in the presence table (0: unbounded)
  bool progress = true;
  uint64_t stop_after_bytes = 0;  // testing: fail after this many body bytes (simulates an interruption)
};

struct PullResult {
  uint64_t downloaded = 0;     // body bytes fetched by this run (shards and small files)
  uint64_t resumed = 0;        // shard bytes already fetched by an earlier, interrupted run
  uint64_t shard_bytes = 0;    // sum of the shards' sizes
  uint64_t local_bytes = 0;    // shard bytes present locally (all of them in full mode)
  int files = 0, shards = 0;
  int experts_verified = 0;    // full mode with a published manifest
};

// "org/name" or a URL -> base + repo.
RemoteRepo parse_pull_source(const std::string& source, const std::string& base, const std::string& revision);

PullResult pull(const PullOptions& opts);

}  // namespace sluice
