// Random weight matrices in every stored format, owning their bytes: for the
// kernel tests and `sluice bench --kernels`. Values are finite and realistic
// (unit-scale weights after scaling); tests overwrite codes or scales to
// reach edge values.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/qmatrix.h"

namespace sluice {

struct OwnedQMatrix {
  std::vector<uint8_t> data, scale;
  QMatrix m;

  OwnedQMatrix() = default;
  OwnedQMatrix(const OwnedQMatrix&) = delete;  // m points into the vectors
  OwnedQMatrix& operator=(const OwnedQMatrix&) = delete;
  OwnedQMatrix(OwnedQMatrix&&) = default;  // vector moves keep their buffers
  OwnedQMatrix& operator=(OwnedQMatrix&&) = default;
};

struct RandomQMatrixOptions {
  int32_t fp8_block = 128;
  int32_t int4_group = 32;
};

OwnedQMatrix make_random_qmatrix(WeightFormat fmt, int64_t rows, int64_t cols, uint64_t seed,
                                 const RandomQMatrixOptions& opt = {});

}  // namespace sluice
