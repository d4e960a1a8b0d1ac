// Random-weight EAGLE-3.1 MLA drafter checkpoints (model/eagle3.h) in the
// layout of K3's (lightseekorg/kimi-k3-eagle3.1-mla): config.json and one
// model.safetensors, at the dimensions asked for, for tests against
// K3-shaped targets (no EAGLE weights are on these machines).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice {

struct Eagle3SynthOptions {
  std::string out_dir;
  int64_t hidden = 7168, intermediate = 18432, heads = 64;
  int64_t q_lora = 1536, kv_lora = 512, nope = 128, rope_dim = 64, v_dim = 128;
  int64_t vocab = 163840, draft_vocab = 163840;
  std::vector<int64_t> aux_ids{2, 46, 90};  // inputs of these target layers (outputs of 1, 45, 89)
  bool fc_norms = true;                     // the 3.1 revision's per-tap norms
  uint64_t seed = 1;
};

// Small widths for a target of this hidden size, vocabulary and layer count:
// K3's aux ids 2/46/90 of 93 layers scaled to it.
Eagle3SynthOptions eagle3_synth_for_target(int64_t target_hidden, int64_t target_vocab, int64_t target_layers);

nlohmann::json eagle3_synth_config(const Eagle3SynthOptions& o);

// Writes config.json and model.safetensors into out_dir (created if needed);
// with draft_vocab < vocab also a d2t map onto every draft_vocab-th id.
void synthesize_eagle3(const Eagle3SynthOptions& o);

}  // namespace sluice
