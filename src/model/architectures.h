// Builders for each family of the family table (one file each) and helpers they share.
#pragma once
#include <memory>
#include <string>

#include "compute/backend.h"
#include "format/checkpoint.h"
#include "format/config.h"
#include "model/decoder.h"
#include "model/model.h"

namespace sluice {

// The builder each row of the family table names (format/model_families.def):
// build_<builder>, defined in model/<builder>.cpp.
#define SLUICE_MODEL_FAMILY(model_type, text_config, experts, tensors, moe_layers, builder, chat_syntax, synth) \
  std::unique_ptr<Decoder> build_##builder(std::unique_ptr<Checkpoint> ckpt, const Config& cfg, Backend& be);
#include "format/model_families.def"

// The decoder config.json describes, over its checkpoint (the decoder keeps it:
// the weights are views into its mapped files), computing on `be` (which places
// the spine weights). Engines call this (engine/engine.h).
std::unique_ptr<Decoder> build_decoder(const Config& cfg, std::unique_ptr<Checkpoint> ckpt,
                                       Backend& be = cpu_backend());

// vocab, hidden, layers, positions and end-of-sequence ids common to all configs.
ModelInfo basic_model_info(const Config& cfg, const std::string& arch);

}  // namespace sluice
