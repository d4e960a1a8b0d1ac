// Rotary position embedding from a config: default frequencies or YaRN
// (the parameters and their definition are in compute/rope.h).
#pragma once
#include <cstdint>

#include "compute/rope.h"
#include "format/config.h"

namespace sluice {

// Reads rope_theta and rope_scaling / rope_parameters from `c`.
Rope rope_from_config(const Config& c, int64_t dim, bool interleaved);

// YaRN magnitude correction: 0.1 * mscale * ln(scale) + 1 (1 when scale <= 1).
double yarn_get_mscale(double scale, double mscale);

// DeepSeek-style MLA's correction of its softmax scale under YaRN: yarn_get_mscale(factor,
// rope_scaling's (or rope_parameters') mscale_all_dim), which the scale is multiplied by twice;
// 1 without YaRN or without mscale_all_dim.
double mla_yarn_mscale(const Config& c, const Rope& rope);

}  // namespace sluice
