#include "model/weights.h"

#include <fmt/ranges.h>

#include "util/error.h"
#include "util/numeric.h"

namespace sluice {

void WeightLoader::shape_error(const TensorView& t, const std::string& want) const {
  fail("{}: tensor '{}' has dtype {} shape [{}], expected {}", *t.file, t.name(), dtype_name(t.dtype()),
       fmt::join(t.shape(), ", "), want);
}

TensorView WeightLoader::tensor(const std::string& name) const {
  TensorView t = ckpt_.get(prefix_ + name);
  accessed_[name] = t.nbytes();
  return t;
}

uint64_t WeightLoader::accessed_bytes() const {
  uint64_t n = 0;
  for (const auto& [_, b] : accessed_) n += b;
  return n;
}

std::vector<std::string> WeightLoader::accessed_names() const {
  std::vector<std::string> out;
  for (const auto& [n, _] : accessed_) out.push_back(prefix_ + n);
  return out;
}

bool WeightLoader::has_linear(const std::string& base) const {
  return has(base + ".weight") || has(base + ".weight_packed");
}

QMatrix WeightLoader::matrix_view(const std::string& name, int64_t rows, int64_t cols) const {
  TensorView t = tensor(name);
  if (t.shape().size() != 2 || (rows >= 0 && t.shape()[0] != rows) || (cols >= 0 && t.shape()[1] != cols))
    shape_error(t, fmt::format("a matrix [{}, {}]", rows, cols));
  QMatrix m;
  m.rows = t.shape()[0];
  m.cols = t.shape()[1];
  m.data = t.data;
  switch (t.dtype()) {
    case DType::F32: m.fmt = WeightFormat::F32; m.row_bytes = m.cols * 4; break;
    case DType::BF16: m.fmt = WeightFormat::BF16; m.row_bytes = m.cols * 2; break;
    case DType::F16: m.fmt = WeightFormat::F16; m.row_bytes = m.cols * 2; break;
    case DType::I8: {  // row-wise int8 from `sluice prepare --spine int8`
      m.fmt = WeightFormat::INT8_ROW;
      m.row_bytes = m.cols;
      TensorView s = tensor(name + "_row_scale");
      if (s.dtype() != DType::F32 || s.numel() != m.rows) shape_error(s, fmt::format("F32 [{}] row scales", m.rows));
      m.scale = s.data;
      break;
    }
    default: shape_error(t, "dtype F32, BF16, F16 or I8 (with _row_scale)");
  }
  return m;
}

QMatrix WeightLoader::linear_view(const std::string& base, int64_t rows, int64_t cols) const {
  if (has(base + ".weight")) {
    TensorView t = tensor(base + ".weight");
    if (t.dtype() != DType::F8_E4M3) return matrix_view(base + ".weight", rows, cols);
    if (t.shape().size() != 2 || (rows >= 0 && t.shape()[0] != rows) || (cols >= 0 && t.shape()[1] != cols))
      shape_error(t, fmt::format("[{}, {}]", rows, cols));
    QMatrix m;
    m.fmt = WeightFormat::FP8_E4M3_BLOCK;
    m.rows = t.shape()[0];
    m.cols = t.shape()[1];
    m.data = t.data;
    m.row_bytes = m.cols;
    m.block = 128;
    const std::string sname = base + ".weight_scale_inv";
    if (!has(sname)) fail("{}: F8_E4M3 weight '{}' has no '{}'", ckpt_.dir(), prefix_ + base + ".weight", prefix_ + sname);
    TensorView s = tensor(sname);
    const int64_t br = (m.rows + 127) / 128, bc = (m.cols + 127) / 128;
    if (s.dtype() != DType::F32 || s.shape() != std::vector<int64_t>{br, bc})
      shape_error(s, fmt::format("F32 [{}, {}] (128x128 blocks of a [{}, {}] weight)", br, bc, m.rows, m.cols));
    m.scale = s.data;
    m.scale_stride = bc;
    return m;
  }
  const std::string pname = base + ".weight_packed", sname = base + ".weight_scale";
  if (!has(pname)) fail("{}: checkpoint has no weight for '{}' (looked for .weight and .weight_packed)", ckpt_.dir(), prefix_ + base);
  if (!has(sname)) fail("{}: '{}' has no '{}'", ckpt_.dir(), prefix_ + pname, prefix_ + sname);
  TensorView p = tensor(pname);
  TensorView s = tensor(sname);
  if (p.shape().size() != 2) shape_error(p, "a 2-D packed weight");
  QMatrix m;
  m.data = p.data;
  m.rows = p.shape()[0];
  if (p.dtype() == DType::I32) {  // INT4 pack-quantized, 8 values per int32
    m.fmt = WeightFormat::INT4_GROUP;
    m.row_bytes = p.shape()[1] * 4;
    m.cols = p.shape()[1] * 8;
    if (has(base + ".weight_shape")) {
      TensorView ws = tensor(base + ".weight_shape");
      if (ws.numel() != 2 || (ws.dtype() != DType::I32 && ws.dtype() != DType::I64)) shape_error(ws, "I32/I64 [2]");
      int64_t r = ws.dtype() == DType::I32 ? reinterpret_cast<const int32_t*>(ws.data)[0]
                                           : reinterpret_cast<const int64_t*>(ws.data)[0];
      int64_t c = ws.dtype() == DType::I32 ? reinterpret_cast<const int32_t*>(ws.data)[1]
                                           : reinterpret_cast<const int64_t*>(ws.data)[1];
      if (r != m.rows || c > m.cols || c <= m.cols - 8)
        fail("{}: '{}' says [{}, {}] but '{}' holds [{}, {}] values", *ws.file, ws.name(), r, c, p.name(), m.rows, m.cols);
      m.cols = c;
    }
    if (s.dtype() != DType::BF16 || s.shape().size() != 2 || s.shape()[0] != m.rows)
      shape_error(s, fmt::format("BF16 [{}, groups]", m.rows));
    int64_t groups = s.shape()[1];
    if (groups <= 0 || m.cols % groups != 0) shape_error(s, fmt::format("a group count dividing {} columns", m.cols));
    m.group = int32_t(m.cols / groups);
    m.scale = s.data;
    m.scale_stride = groups;
  } else if (p.dtype() == DType::U8) {  // MXFP4: two E2M1 values per byte, E8M0 scale per 32
    m.fmt = WeightFormat::MXFP4;
    m.row_bytes = p.shape()[1];
    m.cols = p.shape()[1] * 2;
    if (m.cols % 32 != 0) shape_error(p, "a multiple of 16 bytes per row (32-value MXFP4 blocks)");
    if ((s.dtype() != DType::U8 && s.dtype() != DType::F8_E8M0) ||
        s.shape() != std::vector<int64_t>{m.rows, m.cols / 32})
      shape_error(s, fmt::format("U8 [{}, {}] (E8M0 scale per 32 values)", m.rows, m.cols / 32));
    m.scale = s.data;
    m.scale_stride = m.cols / 32;
  } else {
    shape_error(p, "I32 (INT4 pack-quantized) or U8 (MXFP4)");
  }
  if ((rows >= 0 && m.rows != rows) || (cols >= 0 && m.cols != cols))
    fail("{}: '{}' decodes to [{}, {}], expected [{}, {}]", *p.file, p.name(), m.rows, m.cols, rows, cols);
  return m;
}

QMatrix WeightLoader::mxfp4_stack_slice(const std::string& blocks, const std::string& scales, int64_t expert,
                                        int64_t rows, int64_t cols) const {
  TensorView b = tensor(blocks);
  TensorView s = tensor(scales);
  const int64_t g = cols / 32;
  if (b.dtype() != DType::U8 || b.shape().size() != 4 || b.shape()[1] != rows || b.shape()[2] != g ||
      b.shape()[3] != 16 || expert >= b.shape()[0])
    shape_error(b, fmt::format("U8 [experts, {}, {}, 16]", rows, g));
  if (s.dtype() != DType::U8 || s.shape() != std::vector<int64_t>{b.shape()[0], rows, g})
    shape_error(s, fmt::format("U8 [{}, {}, {}]", b.shape()[0], rows, g));
  QMatrix m;
  m.fmt = WeightFormat::MXFP4;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = g * 16;
  m.data = b.data + expert * rows * m.row_bytes;
  m.scale = s.data + expert * rows * g;
  m.scale_stride = g;
  return m;
}

Vector WeightLoader::vec(const std::string& name, int64_t numel) const {
  const float* v = host_vec(name, numel);
  return be_.vector(v, int64_t(owned_.back().size()));
}

const float* WeightLoader::host_vec(const std::string& name, int64_t numel) const {
  TensorView t = tensor(name);
  if (numel >= 0 && t.numel() != numel) shape_error(t, fmt::format("{} elements", numel));
  std::vector<float> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::F32: v[size_t(i)] = reinterpret_cast<const float*>(t.data)[i]; break;
      case DType::F64: v[size_t(i)] = float(reinterpret_cast<const double*>(t.data)[i]); break;
      case DType::BF16: v[size_t(i)] = bf16_to_f32(reinterpret_cast<const uint16_t*>(t.data)[i]); break;
      case DType::F16: v[size_t(i)] = f16_to_f32(reinterpret_cast<const uint16_t*>(t.data)[i]); break;
      default: shape_error(t, "a float dtype (F32, BF16, F16, F64)");
    }
  }
  owned_.push_back(std::move(v));
  return owned_.back().data();
}

Vector WeightLoader::opt_vec(const std::string& name, int64_t numel) const {
  return has(name) ? vec(name, numel) : Vector{};
}

}  // namespace sluice
