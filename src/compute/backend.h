// The compute seam: everything a model block computes goes through a Backend.
// Blocks keep their structure (which product feeds which norm); every loop
// over activation values is one call here, at the granularity of the math:
// products, norms, RoPE, activations, residual adds, the embedding lookup,
// the attention cores (absorbed MLA over the latent cache, GQA with sinks and
// sliding window, KDA's short convolution and gated delta rule, Block AttnRes
// mixing) and the MoE gather / expert / weighted scatter-add. A call does the
// work (on a GPU it is enqueued on the backend's stream): there is no graph,
// no laziness, no autograd. Activations and per-sequence state are backend
// memory (compute/tensor.h); weights are handles the backend gave out at load
// (compute/weights.h); only small host data crosses (token ids in, router
// logits and final logits out, routing decisions in).
//
// Several sequences in one pass: products and element-wise calls take the rows
// of all sequences at once; the attention cores are called per sequence on its
// own rows, cache and position.
//
// The CPU backend (compute/cpu/) is the reference: it calls the kernels in
// src/kernels. A GPU backend is another implementation of this interface.
//
// The generic ops (memory, products, element-wise, MoE) are what every backend
// implements. The architecture ops (enum Op: the attention cores only some
// families use) are optional: a backend says which it computes itself
// (supports), and the base class computes the others through the host fallback
// (compute/host_fallback.cpp: the op's tensors are downloaded, the CPU
// backend's op runs over them, what it wrote is uploaded back), so a new backend
// runs every family once it has the generic ops, with the CPU's bits where it
// falls back. Blocks call require_op() when they are built: a backend that
// refuses the fallback is refused at load, with a message naming the op.
#pragma once
#include <atomic>
#include <cstdint>
#include <iterator>
#include <span>
#include <string_view>
#include <vector>

#include "compute/activation.h"
#include "compute/expert_source.h"
#include "compute/rope.h"
#include "compute/tensor.h"
#include "compute/weights.h"

namespace sluice {

// Absorbed multi-head latent attention over a latent cache.
struct MlaShape {
  int64_t n_heads = 0, kv_lora = 0, nope = 0, rope_dim = 0, v_dim = 0;
  float scale = 0.0f;
};

// Grouped-query attention over a key and a value cache.
struct GqaShape {
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 0.0f;
  int64_t window = 0;  // 0: full causal attention; else the last `window` positions incl. self
};

// Kimi Delta Attention's decay gate: Kimi Linear -exp(A) softplus(z + dt_bias);
// K3 lower_bound * sigmoid(exp(A) (z + dt_bias)); A per head.
struct KdaGate {
  enum Kind { Softplus, LowerBound } kind = Softplus;
  float lower_bound = -5.0f;
  int64_t n_heads = 0, head_dim = 0;
};

// The architecture ops: the Backend methods of the same names; op_name gives the name ("mla_attend", ...).
enum class Op : uint8_t { MlaAttend, GqaAttend, ShortConv, KdaGate, DeltaRule, AttnResMix, GatedInterleaved };
inline constexpr Op kArchitectureOps[] = {Op::MlaAttend, Op::GqaAttend,  Op::ShortConv,       Op::KdaGate,
                                          Op::DeltaRule, Op::AttnResMix, Op::GatedInterleaved};
std::string_view op_name(Op op);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // ---- which architecture ops the backend computes itself
  // True for each op the backend implements (overrides); the others run through the host fallback.
  virtual bool supports(Op op) const;
  // Whether ops it does not support may run through the host fallback. A backend that says no (its
  // memory is not for the host to read, or a round trip per call is not acceptable) makes a model
  // that needs such an op fail at load, naming the op (require_op).
  virtual bool host_fallback() const { return true; }
  // Calls of `op` the host fallback has computed on this backend so far.
  uint64_t host_fallback_calls(Op op) const { return fallbacks_[size_t(op)].load(std::memory_order_relaxed); }
  void count_host_fallback(Op op) { fallbacks_[size_t(op)].fetch_add(1, std::memory_order_relaxed); }

  // ---- memory (Buffer uses these) and host transfers
  virtual float* allocate(int64_t floats) = 0;  // zero-filled
  virtual void deallocate(float* p) = 0;
  virtual void upload(const float* host, Tensor dst) = 0;    // host: dst.rows() x dst.cols(), packed
  virtual void download(Tensor src, float* host) = 0;        // host: src.rows() x src.cols(), packed
  virtual void copy(Tensor src, Tensor dst) = 0;             // same shape
  virtual void zero(Tensor dst) = 0;

  // ---- weights: where the backend keeps what a block uses
  virtual Matrix matrix(const QMatrix& host) = 0;
  virtual Vector vector(const float* host, int64_t n) = 0;

  // ---- products: y[i] = W x[i] for every row i (x.cols() == W.cols(), y.cols() == W.rows())
  virtual void matmul(const Matrix& w, Tensor x, Tensor y) = 0;

  // ---- element-wise, per row
  // out = x / rms(x) * w over each group of `group` columns (0: the whole row); w may be empty; out may be x.
  virtual void rmsnorm(Tensor x, const Vector& w, float eps, Tensor out, int64_t group = 0) = 0;
  // x *= mul / ||x|| over each group of `group` columns, with eps added to the squared norm.
  virtual void l2norm(Tensor x, int64_t group, float eps, float mul) = 0;
  virtual void add(Tensor x, Tensor y) = 0;               // y += x
  virtual void add_row(const Vector& b, Tensor y) = 0;    // every row of y += b
  virtual void mul_sigmoid(Tensor g, Tensor y) = 0;       // y *= sigmoid(g)
  virtual void sigmoid(Tensor x) = 0;                     // in place
  virtual void gated(const GatedActivation& act, Tensor g, Tensor u, Tensor out) = 0;  // out = act(g, u)
  // Rotates `rope.dim` values at `offset` in each of `heads` chunks of `stride` columns of row t, at position pos0 + t.
  virtual void rope(const Rope& rope, Tensor x, int64_t heads, int64_t stride, int64_t offset, int64_t pos0) = 0;
  // out[t] = table row tokens[t] (ids already checked against the table's rows).
  virtual void embed(const Matrix& table, const int32_t* tokens, int64_t n, Tensor out) = 0;

  // ---- architecture ops (enum Op): the base class's versions are the host fallback
  // out[:, j] = act(gu[:, 2j], gu[:, 2j+1]) (gate and up interleaved by row of the weight, gpt-oss).
  virtual void gated_interleaved(const GatedActivation& act, Tensor gu, Tensor out);
  // Attention cores (one sequence: its rows, its cache, its position).
  // q: [T, H*(nope+rope)] with the rope part already rotated; cache: [pos+T, kv_lora+rope] (normalised latent,
  // rotated shared key); kv_b: the [H*(nope+v), kv_lora] up-projection; o: [T, H*v].
  virtual void mla_attend(const MlaShape& s, const Matrix& kv_b, Tensor q, Tensor cache, int64_t pos, Tensor o);
  // q: [T, H*hd]; k, v caches: [pos+T, KV*hd]; sinks: per head (may be empty); o: [T, H*hd] (overwritten).
  virtual void gqa_attend(const GqaShape& s, const Vector& sinks, Tensor q, Tensor k, Tensor v, int64_t pos,
                          Tensor o);
  // Causal depthwise convolution of x [T, C] over [hist; x] with w [C, K], then SiLU, in place;
  // hist [K-1, C] becomes the last K-1 raw rows.
  virtual void short_conv(const Vector& w, int64_t K, Tensor hist, Tensor x);
  // z [T, H*Dh] becomes the per-channel log decay.
  virtual void kda_gate(const KdaGate& g, const Vector& a_log, const Vector& dt_bias, Tensor z);
  // The gated delta rule token by token, per head h with state S_h = S rows [h*Dh, (h+1)*Dh):
  //   S <- diag(exp g) S;  u = v - S^T k;  S <- S + beta k u^T;  o = S^T q
  // q and o may be empty (replaying recorded updates). k, v, g: [T, H*Dh]; beta: [T, H].
  virtual void delta_rule(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor S, int64_t heads,
                          int64_t head_dim, Tensor o);
  // Block AttnRes: per row, softmax over sources of proj . RMSNorm(source; norm), then the weighted sum of sources.
  virtual void attn_res_mix(std::span<const Tensor> sources, const Vector& norm, const Vector& proj, float eps,
                            Tensor out);

  // ---- mixture of experts
  virtual void gather_rows(Tensor src, const std::vector<int64_t>& rows, Tensor dst) = 0;  // dst[i] = src[rows[i]]
  // One expert over its rows: down(act(gate x, up x)) with the expert's biases.
  virtual void expert_ffn(const ExpertWeights& w, const GatedActivation& act, Tensor x, Tensor y) = 0;
  // acc[rows[i]] += weights[i] * src[i], in i order.
  virtual void scatter_add(Tensor src, const std::vector<int64_t>& rows, const std::vector<float>& weights,
                           Tensor acc) = 0;
  // Several experts over one packed input: expert i runs over rows [offsets[i], offsets[i+1]) of x and
  // writes the same rows of y, bit for bit what expert_ffn on each slice gives (offsets has one entry
  // more than experts). The default calls expert_ffn per slice; a GPU backend runs the group in a
  // few launches instead of several per expert.
  virtual void expert_ffns(std::span<const ExpertWeights* const> experts, std::span<const int64_t> offsets,
                           const GatedActivation& act, Tensor x, Tensor y);
  // True when expert_ffns runs a group at once, holding every row's gate/up scratch together (so the
  // caller packs the group's inputs); false when it goes expert by expert (the caller may then gather
  // each expert's input just before its call, and only one expert's scratch is alive at a time).
  virtual bool groups_experts() const { return false; }
  // The packed index (row * cols + col) of x's first value that is not finite, or -1 when every
  // value is: the check of each layer's hidden state (model/finite_check.h). The default downloads
  // x and scans it; a GPU backend scans where x is and returns only the index.
  virtual int64_t first_nonfinite(Tensor x);

  // The same check without waiting, for a backend whose first_nonfinite makes the host wait for its
  // queue (a GPU: one wait per layer per pass, ~0.1 ms each). When defers_finite_checks(), the
  // decoder calls clear_nonfinite() as a pass begins, watch_nonfinite(h, layer) after each layer
  // (records x's first non-finite value unless a smaller tag has one: the first layer's wins) and
  // take_nonfinite() once at its end. The defaults check at once through first_nonfinite.
  struct NonFinite {
    int64_t tag = -1;    // the watch_nonfinite tag of the first x that had one; -1: every value finite
    int64_t index = -1;  // its packed index in that x (row * cols + col)
    float value = 0.0f;
  };
  virtual bool defers_finite_checks() const { return false; }
  virtual void clear_nonfinite() { watched_ = NonFinite{}; }
  virtual void watch_nonfinite(Tensor x, int64_t tag);
  virtual NonFinite take_nonfinite();

 private:
  NonFinite watched_;  // the defaults' record
  std::atomic<uint64_t> fallbacks_[std::size(kArchitectureOps)];  // zero (C++20)
};

// For blocks, when they are built: returns when `be` computes `op` itself or falls back to the host
// for it; else fails naming the op, the backend and `user` (what needs the op).
void require_op(const Backend& be, Op op, std::string_view user);

// The process's CPU backend (stateless: products use the global thread pool).
Backend& cpu_backend();

}  // namespace sluice
