// The CPU backend: activations in host memory, weights used where they are
// mapped, products through the kernels (src/kernels), the rest as plain loops.
// It is the reference every other backend is compared with.
#pragma once
#include "compute/backend.h"

namespace sluice {

class CpuBackend : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  bool supports(Op) const override { return true; }  // every architecture op

  float* allocate(int64_t floats) override;
  void deallocate(float* p) override;
  void upload(const float* host, Tensor dst) override;
  void download(Tensor src, float* host) override;
  int64_t first_nonfinite(Tensor x) override;  // in place, without a copy
  void copy(Tensor src, Tensor dst) override;
  void zero(Tensor dst) override;

  Matrix matrix(const QMatrix& host) override { return Matrix{host, nullptr}; }
  Vector vector(const float* host, int64_t n) override { return Vector{host, nullptr, n}; }

  void matmul(const Matrix& w, Tensor x, Tensor y) override;

  void rmsnorm(Tensor x, const Vector& w, float eps, Tensor out, int64_t group) override;
  void l2norm(Tensor x, int64_t group, float eps, float mul) override;
  void add(Tensor x, Tensor y) override;
  void add_row(const Vector& b, Tensor y) override;
  void mul_sigmoid(Tensor g, Tensor y) override;
  void sigmoid(Tensor x) override;
  void gated(const GatedActivation& act, Tensor g, Tensor u, Tensor out) override;
  void gated_interleaved(const GatedActivation& act, Tensor gu, Tensor out) override;
  void rope(const Rope& rope, Tensor x, int64_t heads, int64_t stride, int64_t offset, int64_t pos0) override;
  void embed(const Matrix& table, const int32_t* tokens, int64_t n, Tensor out) override;

  void mla_attend(const MlaShape& s, const Matrix& kv_b, Tensor q, Tensor cache, int64_t pos, Tensor o) override;
  void gqa_attend(const GqaShape& s, const Vector& sinks, Tensor q, Tensor k, Tensor v, int64_t pos, Tensor o) override;
  void short_conv(const Vector& w, int64_t K, Tensor hist, Tensor x) override;
  void kda_gate(const KdaGate& g, const Vector& a_log, const Vector& dt_bias, Tensor z) override;
  void delta_rule(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor S, int64_t heads, int64_t head_dim,
                  Tensor o) override;
  void attn_res_mix(std::span<const Tensor> sources, const Vector& norm, const Vector& proj, float eps,
                    Tensor out) override;

  void gather_rows(Tensor src, const std::vector<int64_t>& rows, Tensor dst) override;
  void expert_ffn(const ExpertWeights& w, const GatedActivation& act, Tensor x, Tensor y) override;
  void scatter_add(Tensor src, const std::vector<int64_t>& rows, const std::vector<float>& weights,
                   Tensor acc) override;
};

// act(g, u) for one pair (the definition of each gated activation).
float gated_value(const GatedActivation& act, float g, float u);

}  // namespace sluice
