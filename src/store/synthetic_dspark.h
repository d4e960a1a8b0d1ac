// Random-weight DSpark drafter checkpoints (model/dspark.h) in the published
// layout: config.json and one model.safetensors with the 68 BF16 tensors under
// their released names, at the dimensions asked for. No DSpark weights are on
// these machines; these let the loader, the forward and the drafting loop be
// tested against a target such as the kimi_k3_tiny golden model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice {

struct DSparkSynthOptions {
  std::string out_dir;
  int64_t hidden = 7168, intermediate = 14336, layers = 5, heads = 64;
  int64_t q_lora = 1536, kv_lora = 512, nope = 128, rope_dim = 64, v_dim = 128;
  int64_t vocab = 163840, target_hidden = 7168, target_layer_count = 93, markov_rank = 256;
  std::vector<int64_t> target_layers{2, 23, 47, 71, 89};
  int32_t mask_token = 163837;
  uint64_t seed = 1;
};

// Options for a drafter of a target with this hidden size, vocabulary and
// layer count, at small widths: K3's target layers [2,23,47,71,89] of 93
// scaled to the target's layer count, the mask token 3 ids below the top
// (K3's 163837 of 163840).
DSparkSynthOptions dspark_synth_for_target(int64_t target_hidden, int64_t target_vocab, int64_t target_layers);

// The config.json synthesize_dspark() writes.
nlohmann::json dspark_synth_config(const DSparkSynthOptions& o);

// Writes config.json and model.safetensors into out_dir (created if needed).
void synthesize_dspark(const DSparkSynthOptions& o);

}  // namespace sluice
