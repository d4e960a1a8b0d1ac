#include "compute/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "util/error.h"

namespace sluice {

Backend& cpu_backend() {
  static CpuBackend be;
  return be;
}

float gated_value(const GatedActivation& a, float g, float u) {
  switch (a.kind) {
    case GatedActivation::SwiGLU: return ops::silu(g) * u;
    case GatedActivation::SiTU:
      return a.beta * std::tanh(g / a.beta) * ops::sigmoid(g) * (a.linear_beta * std::tanh(u / a.linear_beta));
    case GatedActivation::ClampedSwiGLU: {
      g = std::min(g, a.limit);
      u = std::max(-a.limit, std::min(u, a.limit));
      return (u + 1.0f) * g * ops::sigmoid(a.alpha * g);
    }
  }
  return 0.0f;
}

// ---- memory

float* CpuBackend::allocate(int64_t floats) { return new float[size_t(floats)](); }
void CpuBackend::deallocate(float* p) { delete[] p; }

void CpuBackend::upload(const float* host, Tensor dst) {
  for (int64_t r = 0; r < dst.rows(); ++r)
    std::memcpy(dst.data() + r * dst.ld(), host + r * dst.cols(), size_t(dst.cols()) * sizeof(float));
}

void CpuBackend::download(Tensor src, float* host) {
  for (int64_t r = 0; r < src.rows(); ++r)
    std::memcpy(host + r * src.cols(), src.data() + r * src.ld(), size_t(src.cols()) * sizeof(float));
}

int64_t CpuBackend::first_nonfinite(Tensor x) {
  for (int64_t r = 0; r < x.rows(); ++r) {
    const float* row = x.data() + r * x.ld();
    for (int64_t c = 0; c < x.cols(); ++c)
      if (!std::isfinite(row[c])) return r * x.cols() + c;
  }
  return -1;
}

void CpuBackend::copy(Tensor src, Tensor dst) {
  if (src.rows() != dst.rows() || src.cols() != dst.cols())
    fail("internal: copy of [{}, {}] into [{}, {}]", src.rows(), src.cols(), dst.rows(), dst.cols());
  for (int64_t r = 0; r < src.rows(); ++r)
    std::memmove(dst.data() + r * dst.ld(), src.data() + r * src.ld(), size_t(src.cols()) * sizeof(float));
}

void CpuBackend::zero(Tensor dst) {
  for (int64_t r = 0; r < dst.rows(); ++r) std::fill(dst.data() + r * dst.ld(), dst.data() + r * dst.ld() + dst.cols(), 0.0f);
}

// ---- products

void CpuBackend::matmul(const Matrix& w, Tensor x, Tensor y) {
  sluice::matmul(w.q, x.data(), x.rows(), x.ld(), y.data(), y.ld());
}

// ---- element-wise

void CpuBackend::rmsnorm(Tensor x, const Vector& w, float eps, Tensor out, int64_t group) {
  const int64_t g = group > 0 ? group : x.cols();
  for (int64_t t = 0; t < x.rows(); ++t)
    for (int64_t c = 0; c < x.cols(); c += g)
      ops::rmsnorm(x.data() + t * x.ld() + c, w.host, eps, g, out.data() + t * out.ld() + c);
}

void CpuBackend::l2norm(Tensor x, int64_t group, float eps, float mul) {
  for (int64_t t = 0; t < x.rows(); ++t)
    for (int64_t c = 0; c < x.cols(); c += group) {
      float* v = x.data() + t * x.ld() + c;
      double ss = 0.0;
      for (int64_t i = 0; i < group; ++i) ss += double(v[i]) * v[i];
      const float inv = float(1.0 / std::sqrt(ss + eps)) * mul;
      for (int64_t i = 0; i < group; ++i) v[i] *= inv;
    }
}

void CpuBackend::add(Tensor x, Tensor y) {
  if (x.contiguous() && y.contiguous()) {
    ops::add(x.data(), y.data(), x.rows() * x.cols());
    return;
  }
  for (int64_t t = 0; t < x.rows(); ++t) ops::add(x.data() + t * x.ld(), y.data() + t * y.ld(), x.cols());
}

void CpuBackend::add_row(const Vector& b, Tensor y) {
  for (int64_t t = 0; t < y.rows(); ++t) ops::add(b.host, y.data() + t * y.ld(), y.cols());
}

void CpuBackend::mul_sigmoid(Tensor g, Tensor y) {
  for (int64_t t = 0; t < y.rows(); ++t) {
    const float* gr = g.data() + t * g.ld();
    float* yr = y.data() + t * y.ld();
    for (int64_t c = 0; c < y.cols(); ++c) yr[c] *= ops::sigmoid(gr[c]);
  }
}

void CpuBackend::sigmoid(Tensor x) {
  for (int64_t t = 0; t < x.rows(); ++t) {
    float* r = x.data() + t * x.ld();
    for (int64_t c = 0; c < x.cols(); ++c) r[c] = ops::sigmoid(r[c]);
  }
}

void CpuBackend::gated(const GatedActivation& act, Tensor g, Tensor u, Tensor out) {
  for (int64_t t = 0; t < g.rows(); ++t) {
    const float* gr = g.data() + t * g.ld();
    const float* ur = u.data() + t * u.ld();
    float* o = out.data() + t * out.ld();
    for (int64_t c = 0; c < g.cols(); ++c) o[c] = gated_value(act, gr[c], ur[c]);
  }
}

void CpuBackend::gated_interleaved(const GatedActivation& act, Tensor gu, Tensor out) {
  for (int64_t t = 0; t < gu.rows(); ++t) {
    const float* row = gu.data() + t * gu.ld();
    float* o = out.data() + t * out.ld();
    for (int64_t j = 0; j < out.cols(); ++j) o[j] = gated_value(act, row[2 * j], row[2 * j + 1]);
  }
}

void CpuBackend::rope(const Rope& rope, Tensor x, int64_t heads, int64_t stride, int64_t offset, int64_t pos0) {
  for (int64_t t = 0; t < x.rows(); ++t)
    for (int64_t h = 0; h < heads; ++h) rope.apply(x.data() + t * x.ld() + h * stride + offset, pos0 + t);
}

void CpuBackend::embed(const Matrix& table, const int32_t* tokens, int64_t n, Tensor out) {
  for (int64_t t = 0; t < n; ++t) decode_row_ref(table.q, tokens[t], out.data() + t * out.ld());
}

// ---- mixture of experts

void CpuBackend::gather_rows(Tensor src, const std::vector<int64_t>& rows, Tensor dst) {
  for (size_t i = 0; i < rows.size(); ++i) {
    const float* s = src.data() + rows[i] * src.ld();
    std::copy(s, s + src.cols(), dst.data() + int64_t(i) * dst.ld());
  }
}

void CpuBackend::expert_ffn(const ExpertWeights& ew, const GatedActivation& act, Tensor x, Tensor y) {
  const int64_t n = x.rows(), width = x.cols();
  if (ew.gate_up_interleaved) {
    const int64_t I2 = ew.gate.rows(), I = I2 / 2;
    std::vector<float> gu(size_t(n * I2)), h(size_t(n * I));
    sluice::matmul(ew.gate.q, x.data(), n, x.ld(), gu.data(), I2);
    for (int64_t t = 0; t < n; ++t) {
      float* row = gu.data() + t * I2;
      if (ew.gate_up_bias.host) ops::add(ew.gate_up_bias.host, row, I2);
      for (int64_t j = 0; j < I; ++j) h[size_t(t * I + j)] = gated_value(act, row[2 * j], row[2 * j + 1]);
    }
    sluice::matmul(ew.down.q, h.data(), n, I, y.data(), y.ld());
  } else {
    const int64_t I = ew.gate.rows();
    std::vector<float> g(size_t(n * I)), u(size_t(n * I));
    sluice::matmul(ew.gate.q, x.data(), n, x.ld(), g.data(), I);
    sluice::matmul(ew.up.q, x.data(), n, x.ld(), u.data(), I);
    for (size_t i = 0; i < g.size(); ++i) g[i] = gated_value(act, g[i], u[i]);
    sluice::matmul(ew.down.q, g.data(), n, I, y.data(), y.ld());
  }
  if (ew.down_bias.host)
    for (int64_t t = 0; t < n; ++t) ops::add(ew.down_bias.host, y.data() + t * y.ld(), width);
}

void CpuBackend::scatter_add(Tensor src, const std::vector<int64_t>& rows, const std::vector<float>& weights,
                             Tensor acc) {
  for (size_t i = 0; i < rows.size(); ++i)
    ops::axpy(weights[i], src.data() + int64_t(i) * src.ld(), acc.data() + rows[i] * acc.ld(), acc.cols());
}

}  // namespace sluice
