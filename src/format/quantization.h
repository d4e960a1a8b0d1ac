// config.json's quantization_config, checked against the weight formats the
// loaders implement before any weight is read: FP8 e4m3 with 128x128 block
// scales and dynamic activations (DeepSeek-V3, Kimi K2), gpt-oss MXFP4, and
// compressed-tensors pack-quantized weights: symmetric INT4 groups (Kimi
// K2-Thinking) or MXFP4 (Kimi K3). Anything else (zero points, input or KV-cache
// scales, 8-bit, other methods) would load and decode wrong, so it is refused
// with an error naming the field.
#pragma once
#include "format/config.h"

namespace sluice {

// Checks quantization_config at the top level of `top` and in its text_config.
void check_quantization_config(const Config& top);

}  // namespace sluice
