// Random-weight checkpoints in the real release layouts (tensor names, dtypes,
// shard layout, expert order), at real or small dimensions, so that I/O and
// compute can be measured on models larger than RAM without downloading one.
// Weights are scaled so activations stay O(1) and routing is non-degenerate.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "store/synthetic_routing.h"

namespace sluice {

struct SynthOptions {
  std::string arch;            // deepseek_v3 | kimi_k2 | qwen3_moe | kimi_k3
  std::string preset = "small";  // "real": the released model's widths; "small": golden-sized
  std::string out_dir;
  std::optional<int64_t> layers, experts, top_k, vocab, hidden, moe_intermediate;
  std::string expert_format = "native";  // deepseek_v3/kimi_k2: bf16 | fp8 | int4 ("native": bf16 small, fp8 real)
  uint64_t seed = 1;
  // "random": i.i.d. router rows and a small random score-correction bias (the
  // original synthetic routing: tokens spread by chance, little reuse between
  // them); "realistic": popular experts and lasting topics (store/synthetic_routing.h).
  std::string routing = "random";
  RealisticRouting realistic;
  bool progress = true;
};

// One line naming the routing and its parameters (also in each shard's metadata).
std::string synth_routing_label(const SynthOptions& o);

// The config.json the options describe (also what synthesize() writes).
nlohmann::json synth_config(const SynthOptions& o);

// Bytes of weights synthesize() would write (nothing is written).
uint64_t synth_bytes(const SynthOptions& o);

// Writes config.json, shards and model.safetensors.index.json into out_dir,
// after checking that the filesystem has room for them. Returns the number of
// bytes written.
uint64_t synthesize(const SynthOptions& o);

}  // namespace sluice
