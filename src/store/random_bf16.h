// A BF16 tensor of random values, for the random-weight drafter checkpoints
// (store/synthetic_dspark.h, store/synthetic_eagle3.h).
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "format/safetensors.h"

namespace sluice {

// Values centre + std * N(0, 1), rounded to BF16.
TensorData random_bf16(const std::string& name, std::vector<int64_t> shape, std::mt19937_64& rng, double std,
                       double centre);

}  // namespace sluice
