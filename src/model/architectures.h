// Builders for each supported architecture (one file each) and helpers they share.
#pragma once
#include <memory>
#include <string>

#include "compute/backend.h"
#include "format/checkpoint.h"
#include "format/config.h"
#include "model/decoder.h"
#include "model/model.h"

namespace sluice {

std::unique_ptr<Decoder> build_deepseek_v3(std::unique_ptr<Checkpoint> ckpt, const Config& cfg, Backend& be);
std::unique_ptr<Decoder> build_qwen3_moe(std::unique_ptr<Checkpoint> ckpt, const Config& cfg, Backend& be);
std::unique_ptr<Decoder> build_gpt_oss(std::unique_ptr<Checkpoint> ckpt, const Config& cfg, Backend& be);
// kimi_linear, kimi_k3
std::unique_ptr<Decoder> build_kimi(std::unique_ptr<Checkpoint> ckpt, const Config& cfg, Backend& be);

// The decoder config.json describes, over its checkpoint (the decoder keeps it:
// the weights are views into its mapped files), computing on `be` (which places
// the spine weights). Engines call this (engine/engine.h).
std::unique_ptr<Decoder> build_decoder(const Config& cfg, std::unique_ptr<Checkpoint> ckpt,
                                       Backend& be = cpu_backend());

// vocab, hidden, layers, positions and end-of-sequence ids common to all configs.
ModelInfo basic_model_info(const Config& cfg, const std::string& arch);

}  // namespace sluice
