#include "kernels/random_qmatrix.h"

#include <cmath>
#include <cstring>
#include <random>

#include "util/numeric.h"

namespace sluice {

namespace {

void put_f32(std::vector<uint8_t>& v, size_t i, float f) { std::memcpy(v.data() + 4 * i, &f, 4); }
void put_u16(std::vector<uint8_t>& v, size_t i, uint16_t h) { std::memcpy(v.data() + 2 * i, &h, 2); }

// FP8 e4m3 codes (no NaN) with a positive f32 scale per block x block tile.
void fill_fp8_block(OwnedQMatrix& o, int64_t block, std::mt19937_64& rng, std::normal_distribution<float>& normal) {
  QMatrix& m = o.m;
  m.row_bytes = m.cols;
  o.data.resize(size_t(m.rows * m.cols));
  for (auto& b : o.data) {
    b = uint8_t(rng() & 0xff);
    if ((b & 0x7f) == 0x7f) b &= 0xfe;  // no NaN codes by default
  }
  m.block = block;
  m.scale_stride = (m.cols + m.block - 1) / m.block;
  const size_t n = size_t(((m.rows + m.block - 1) / m.block) * m.scale_stride);
  o.scale.resize(n * 4);
  for (size_t i = 0; i < n; ++i) put_f32(o.scale, i, (0.5f + std::abs(normal(rng))) * 0.004f);
}

// Packed INT4 values with a positive bf16 scale per group of a row.
void fill_int4_group(OwnedQMatrix& o, int64_t group, std::mt19937_64& rng, std::normal_distribution<float>& normal) {
  QMatrix& m = o.m;
  m.row_bytes = (m.cols + 1) / 2;
  o.data.resize(size_t(m.rows * m.row_bytes));
  for (auto& b : o.data) b = uint8_t(rng() & 0xff);
  m.group = group;
  m.scale_stride = (m.cols + m.group - 1) / m.group;
  const size_t n = size_t(m.rows * m.scale_stride);
  o.scale.resize(n * 2);
  for (size_t i = 0; i < n; ++i) put_u16(o.scale, i, f32_to_bf16((0.5f + std::abs(normal(rng))) * 0.05f));
}

}  // namespace

OwnedQMatrix make_random_qmatrix(WeightFormat fmt, int64_t rows, int64_t cols, uint64_t seed,
                                 const RandomQMatrixOptions& opt) {
  OwnedQMatrix o;
  QMatrix& m = o.m;
  m.fmt = fmt;
  m.rows = rows;
  m.cols = cols;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto byte = [&] { return uint8_t(rng() & 0xff); };
  const size_t count = size_t(rows * cols);
  switch (fmt) {
    case WeightFormat::F32:
      m.row_bytes = cols * 4;
      o.data.resize(count * 4);
      for (size_t i = 0; i < count; ++i) put_f32(o.data, i, normal(rng));
      break;
    case WeightFormat::BF16:
      m.row_bytes = cols * 2;
      o.data.resize(count * 2);
      for (size_t i = 0; i < count; ++i) put_u16(o.data, i, f32_to_bf16(normal(rng)));
      break;
    case WeightFormat::F16:
      m.row_bytes = cols * 2;
      o.data.resize(count * 2);
      // Any finite half, subnormals included: exponent field 0..30.
      for (size_t i = 0; i < count; ++i) {
        uint16_t h = uint16_t(rng() & 0xffff);
        if (((h >> 10) & 31) == 31) h = uint16_t(h & ~0x4000);
        put_u16(o.data, i, h);
      }
      break;
    case WeightFormat::FP8_E4M3_BLOCK:
      fill_fp8_block(o, opt.fp8_block, rng, normal);
      break;
    case WeightFormat::INT4_GROUP:
      fill_int4_group(o, opt.int4_group, rng, normal);
      break;
    case WeightFormat::MXFP4: {
      m.row_bytes = (cols + 1) / 2;
      o.data.resize(size_t(rows * m.row_bytes));
      for (auto& b : o.data) b = byte();
      m.scale_stride = (cols + 31) / 32;
      o.scale.resize(size_t(rows * m.scale_stride));
      for (auto& b : o.scale) b = uint8_t(118 + rng() % 12);
      break;
    }
    case WeightFormat::INT8_ROW: {
      m.row_bytes = cols;
      o.data.resize(count);
      for (auto& b : o.data) b = byte();
      o.scale.resize(size_t(rows) * 4);
      for (int64_t r = 0; r < rows; ++r) put_f32(o.scale, size_t(r), (0.5f + std::abs(normal(rng))) * 0.01f);
      break;
    }
  }
  m.data = o.data.data();
  m.scale = o.scale.empty() ? nullptr : o.scale.data();
  return o;
}

}  // namespace sluice
