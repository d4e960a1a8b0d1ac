#include "store/random_bf16.h"

#include "util/numeric.h"

namespace sluice {

TensorData random_bf16(const std::string& name, std::vector<int64_t> shape, std::mt19937_64& rng, double std,
                       double centre) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  TensorData t{name, DType::BF16, std::move(shape), std::vector<uint8_t>(size_t(n) * 2)};
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_bf16(float(centre + std * normal(rng)));
    t.bytes[size_t(2 * i)] = uint8_t(h & 0xff);
    t.bytes[size_t(2 * i + 1)] = uint8_t(h >> 8);
  }
  return t;
}

}  // namespace sluice
