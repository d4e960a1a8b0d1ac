// Builders for each supported architecture (one file each) and helpers they share.
#pragma once
#include <memory>
#include <string>

#include "format/config.h"
#include "model/decoder.h"
#include "model/model.h"

namespace sluice {

std::unique_ptr<Decoder> build_deepseek_v3(const std::string& dir, const Config& cfg);
std::unique_ptr<Decoder> build_qwen3_moe(const std::string& dir, const Config& cfg);
std::unique_ptr<Decoder> build_gpt_oss(const std::string& dir, const Config& cfg);
std::unique_ptr<Decoder> build_kimi(const std::string& dir, const Config& cfg);  // kimi_linear, kimi_k3

// vocab, hidden, layers, positions and end-of-sequence ids common to all configs.
ModelInfo basic_model_info(const Config& cfg, const std::string& arch);

}  // namespace sluice
