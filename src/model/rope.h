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

}  // namespace sluice
