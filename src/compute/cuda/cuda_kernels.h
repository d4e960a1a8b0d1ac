// Launchers for the CUDA backend's kernels (cuda_kernels.cu, compiled by nvcc).
// Plain C++ types only, so cuda_backend.cpp (compiled by the host compiler)
// can call them; every pointer is device memory unless its name says host.
// Each launcher enqueues on `stream` and returns the launch's cudaError_t as
// an int (0: success); the caller turns errors into messages naming the op.
//
// Reductions have a fixed shape that depends only on the row being reduced,
// never on how many rows are in the call, so one token alone and the same
// token inside a batch give bit-identical results (speculation relies on it).
#pragma once
#include <cstdint>

#include "compute/activation.h"
#include "kernels/qmatrix.h"

namespace sluice::cuda {

using Stream = void*;  // cudaStream_t

// Row indices (and weights) of a gather / scatter / embedding lookup: short
// lists travel inside the launch's parameters (no allocation, no copy; a
// decode step's lists are this short), longer ones in device memory.
constexpr int kInlineRows = 32;
struct RowList {
  int64_t n = 0;
  const int64_t* rows = nullptr;    // device, when n > kInlineRows
  const float* weights = nullptr;   // device, when n > kInlineRows
  int64_t inline_rows[kInlineRows];
  float inline_weights[kInlineRows];
};

// Y[i, r] = sum_c W[r, c] X[i, c]; W's data and scales are device pointers.
int matmul(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy, Stream s);
// One product of a grouped launch: Y = W X over n rows (all device pointers).
struct MatmulProblem {
  QMatrix W;
  const float* X = nullptr;
  float* Y = nullptr;
  int64_t n = 0, ldx = 0, ldy = 0;
  bool aligned = false, xvec = false;  // set by prepare_problem
};
// Where every problem of a grouped call takes its X as a run of whole rows of one matrix (the
// experts' slices of one activation matrix): its address, row count and row stride (each problem's
// ldx). The tensor-core kernels then split those rows into their bf16 parts once for all the
// problems. Empty (base null): each block splits its own.
struct SharedRows {
  const float* base = nullptr;
  int64_t rows = 0, ld = 0;
};
// Fills in the problem's load widths (host side, before the problems are copied to the device).
void prepare_problem(MatmulProblem& p);
// Every problem (`dev`: `count` of them in device memory, all weights in format `fmt` with `cols`
// columns, on the tensor cores or not as tc_eligible says of each, none with more than max_rows
// rows, none over more than max_n activation rows) in one launch; each output row bit-identical
// to matmul() of its problem.
int grouped_matmul(WeightFormat fmt, bool tensor_cores, const MatmulProblem* dev, int count, int64_t max_rows,
                   int64_t cols, int64_t max_n, Stream s, const SharedRows& x = {});

// Tensor-core products (cuda_matmul_tc.cu). Whether W's products run on the tensor cores: a
// property of the matrix alone (format, columns, group, row stride), so every call with it
// gives the same bits whatever the number of activation rows. matmul() dispatches by it.
bool tc_eligible(const QMatrix& W);
// Process-wide switch (SLUICE_CUDA_TENSOR_CORES=0 starts with it off); for benchmarks that
// compare the two paths. Products before and after a switch are not bit-comparable.
void set_tensor_core_products(bool on);
// Whether products of 1-8 activation rows on the tensor cores stream the weights through shared
// memory (1) or take them round by round (0), or choose by the matrix's rows (2, the default;
// grouped calls then stream); SLUICE_CUDA_STREAM_SMALL=0 or 1 starts with one forced. The same
// bits either way, for the tests and benchmarks that compare them.
void set_streaming_small_products(int mode);
// 16-row tiles per streaming block: 1 or 2 forces it, 0 the format's default (the same bits).
void set_streaming_small_tiles(int rt);
// The large-n (9+ rows) kernel: 2 on the warpgroup MMAs, each block splitting the activations into
// their parts (a Hopper GPU and a build for sm_90a; the default), 3 the same kernel on parts split
// once per product (not yet measured on a GPU), 1 pipelined on mma.sync (the default elsewhere), 0
// the first one (two barriers a stage). The same bits (tests). Asking for 2 or 3 where they cannot
// run gives 1.
void set_large_products_variant(int v);
// The variant that runs now (after that fallback).
int large_products_variant();
// The current device's compute capability, major * 10 + minor (90: Hopper), 0 on failure.
int compute_capability();
int tc_matmul(const QMatrix& W, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy, Stream s);
int tc_grouped_matmul(WeightFormat fmt, const MatmulProblem* dev, int count, int64_t max_rows, int64_t cols,
                      int64_t max_n, Stream s, const SharedRows& x = {});
// D = A B + C for `count` m16n8k16 problems by one mma.sync each (A [16][16] row-major, B [8][16]
// column by column, both bf16 bits; C, D [16][8] f32), for checking what the products assume.
// Synchronous: waits for the whole device before and after.
int mma_probe(const uint16_t* A, const uint16_t* B, const float* C, float* D, int count);
// The rate of independent bf16 mma.sync chains on the current device (TFLOP/s), 0 on failure.
double mma_rate_tflops();
// out[t] = decoded table row tokens[t].
int embed(const QMatrix& table, const RowList& tokens, float* out, int64_t ldo, Stream s);

int rmsnorm(const float* x, int64_t ldx, int64_t rows, int64_t cols, const float* w, float eps, float* out,
            int64_t ldo, int64_t group, Stream s);
int l2norm(float* x, int64_t ldx, int64_t rows, int64_t cols, int64_t group, float eps, float mul, Stream s);
int add(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t cols, Stream s);
int add_row(const float* b, float* y, int64_t ldy, int64_t rows, int64_t cols, Stream s);
int mul_sigmoid(const float* g, int64_t ldg, float* y, int64_t ldy, int64_t rows, int64_t cols, Stream s);
int sigmoid(float* x, int64_t ldx, int64_t rows, int64_t cols, Stream s);
int gated(const GatedActivation& act, const float* g, int64_t ldg, const float* u, int64_t ldu, float* out,
          int64_t ldo, int64_t rows, int64_t cols, Stream s);
int gated_interleaved(const GatedActivation& act, const float* gu, int64_t ldgu, float* out, int64_t ldo,
                      int64_t rows, int64_t cols, Stream s);
// inv_freq: dim/2 doubles on the device.
int rope(const double* inv_freq, int64_t dim, bool interleaved, double attention_factor, float* x, int64_t ldx,
         int64_t rows, int64_t heads, int64_t stride, int64_t offset, int64_t pos0, Stream s);

struct MlaArgs {
  int64_t H, C, R, N, V;
  float scale;
  QMatrix kv_b;  // device
  const float* q;
  int64_t ldq, T;
  const float* cache;
  int64_t ldc, pos;
  float* o;
  int64_t ldo;
  // Scratch: qabs and ctx T * H * C floats each, and optionally (part not null) room for the key
  // splits' partials, T * H * splits * (C + 2) floats (splits = mla_splits(pos, T)): the splits
  // are then computed in parallel (a step of a few tokens), else each block folds its rows' splits
  // in turn. The same bits either way.
  float *part, *qabs, *ctx;
  int64_t splits;
};
int64_t mla_splits(int64_t pos, int64_t T);
int mla_attend(const MlaArgs& a, Stream s);

struct GqaArgs {
  int64_t H, KV, hd, window;
  float scale;
  const float* sinks;  // per head or null
  const float* q;
  int64_t ldq, T;
  const float *k, *v;
  int64_t ldk, ldv, pos;
  float* o;
  int64_t ldo;
  float* scratch;  // T * H * (pos + T + 1) floats
};
int gqa_attend(const GqaArgs& a, Stream s);

int short_conv(const float* w, int64_t K, float* hist, int64_t ldh, float* x, int64_t ldx, int64_t T, int64_t C,
               Stream s);
int kda_gate(bool softplus, float lower_bound, int64_t H, int64_t Dh, const float* a_log, const float* dt_bias,
             float* z, int64_t ldz, int64_t T, Stream s);
// q and o may be null.
int delta_rule(const float* q, int64_t ldq, const float* k, int64_t ldk, const float* v, int64_t ldv, const float* g,
               int64_t ldg, const float* beta, int64_t ldb, float* S, int64_t ldS, int64_t T, int64_t H, int64_t Dh,
               float* o, int64_t ldo, Stream s);

constexpr int kMaxAttnResSources = 64;
struct AttnResArgs {
  const float* src[kMaxAttnResSources];
  int64_t ld[kMaxAttnResSources];
  int n;
  const float *norm, *proj;
  float eps;
  float* out;
  int64_t ldo, T, D;
};
int attn_res_mix(const AttnResArgs& a, Stream s);

int gather_rows(const float* src, int64_t lds, const RowList& rows, int64_t cols, float* dst, int64_t ldd, Stream s);
// *first = min(*first, r * cols + c) over the values x[r * ldx + c] that are not finite (the caller
// sets *first to UINT64_MAX before).
int first_nonfinite(const float* x, int64_t ldx, int64_t rows, int64_t cols, unsigned long long* first, Stream s);
// The deferred check (Backend::watch_nonfinite): rec->key = min(rec->key, tag << 40 | (r * cols + c)) over
// the non-finite values, then, if x holds the minimum (its tag), rec->value = that value: two launches, no wait.
struct NonFiniteRecord {
  unsigned long long key;  // UINT64_MAX: none
  float value;
};
int watch_nonfinite(const float* x, int64_t ldx, int64_t rows, int64_t cols, int64_t tag, NonFiniteRecord* rec,
                    Stream s);
int scatter_add(const float* src, int64_t lds, const RowList& rows, int64_t cols, float* acc, int64_t lda, Stream s);
// The same sum with the rows grouped by target (device arrays): acc[targets[j]] += weights[k] * src[src_rows[k]]
// for k in [starts[j], starts[j+1]) in k order; one thread per (target, column), so long lists run in parallel.
struct ScatterPlan {
  int64_t n_targets = 0;
  const int64_t* targets = nullptr;
  const int64_t* starts = nullptr;  // n_targets + 1
  const int64_t* src_rows = nullptr;
  const float* weights = nullptr;
};
int scatter_add_by_target(const float* src, int64_t lds, const ScatterPlan& plan, int64_t cols, float* acc,
                          int64_t lda, Stream s);

}  // namespace sluice::cuda
