// The CUDA backend: activations, per-sequence state and the spine in the
// GPU's memory (weights as stored: bf16, FP8 with block scales, int8, INT4,
// MXFP4), every op a kernel on one stream (compute/cuda/cuda_kernels.h), f32
// accumulation and no TF32. Host <-> device traffic is what the seam says
// crosses: token ids and routing decisions in, router logits and final
// logits out. A routed expert whose handle has no device copy is copied in
// for the call (the VRAM expert cache, experts/cuda/vram_experts.h, keeps them).
//
// Errors (out of memory, a failed launch, a fault found at the next
// synchronisation) are sluice::Error messages naming what was being allocated
// or run. SLUICE_CUDA_SYNC=1 synchronises after every op so a fault names the
// op that caused it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compute/backend.h"

namespace sluice {

class CudaBackend : public Backend {
 public:
  // Opens device `index` (throws naming it when there is none).
  explicit CudaBackend(int index);
  ~CudaBackend() override;

  const char* name() const override { return "cuda"; }
  bool supports(Op) const override { return true; }  // every architecture op
  int device_index() const;

  float* allocate(int64_t floats) override;
  void deallocate(float* p) override;
  void upload(const float* host, Tensor dst) override;
  void download(Tensor src, float* host) override;
  int64_t first_nonfinite(Tensor x) override;  // on the GPU: 8 bytes come back
  // Deferred: recorded on the GPU, read back once per pass (take_nonfinite, 16 bytes); with
  // SLUICE_CUDA_FINITE_WAIT=1 each layer's check waits for the GPU, as before (for comparisons).
  bool defers_finite_checks() const override;
  void clear_nonfinite() override;
  void watch_nonfinite(Tensor x, int64_t tag) override;
  NonFinite take_nonfinite() override;
  // MLA attention computes its key splits in parallel while their partials fit in this many bytes
  // (512 MiB), else folds them block by block: the same bits either way (a test compares them).
  void set_attention_partials_limit(uint64_t bytes);
  void copy(Tensor src, Tensor dst) override;
  void zero(Tensor dst) override;

  Matrix matrix(const QMatrix& host) override;
  Vector vector(const float* host, int64_t n) override;

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
  void expert_ffns(std::span<const ExpertWeights* const> experts, std::span<const int64_t> offsets,
                   const GatedActivation& act, Tensor x, Tensor y) override;
  bool groups_experts() const override { return true; }

  // ---- for the VRAM expert cache (experts/cuda/vram_experts.h)
  // Device bytes for a matrix's data and scales, and a copy into them.
  struct DeviceBytes {
    uint8_t* data = nullptr;
    uint64_t bytes = 0;
  };
  DeviceBytes allocate_bytes(uint64_t bytes, const char* what);
  void free_bytes(DeviceBytes b);
  // Copies `host`'s data and scales into `dst` (at least placed_bytes(host))
  // and returns the device view; the copy is complete when this returns.
  QMatrix place_into(const QMatrix& host, uint8_t* dst);
  static uint64_t placed_bytes(const QMatrix& host);
  // Page-locks host memory so copies from it run at full speed (false, with
  // the reason on stderr, when the system refuses); unpin_host undoes it.
  bool pin_host(void* p, uint64_t bytes);
  void unpin_host(void* p);
  // Waits for everything enqueued; errors name `what`.
  void synchronize(const char* what);

  // Bytes of weights placed with matrix()/vector() so far.
  uint64_t weight_bytes() const;
  uint64_t free_device_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The process's CUDA backend for device `index` (opened on first use).
Backend& cuda_backend(int index);

}  // namespace sluice
