// What a saved session state (runtime/state_file.h) is bound to: a state
// restores bit for bit only into the model, device and kernels that computed
// it, so the identity covers all three.
#pragma once
#include <string>

namespace sluice {

class Engine;

// "<model_type> <device> <isa> r<numerics revision> <XXH3-128 hex>" (kernels/isa.h
// kNumericsRevision: kernels that changed their bits), the hash over config.json,
// every checkpoint file's name, size and safetensors header, the prepared
// manifest's spine format and expert checksums when there is one, and
// sampled bytes of each file's tensor data (not in a stream-mode directory,
// whose sparse shards fill in as experts are fetched: there the headers,
// sizes and the repository's manifest stand for the weights). Reads about
// 100 KiB per file.
std::string model_identity(const Engine& engine);

}  // namespace sluice
