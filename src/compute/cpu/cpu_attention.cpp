// The CPU backend's attention cores: absorbed MLA, GQA with sinks and sliding
// windows, KDA's short convolution, decay gate and gated delta rule, and Block
// AttnRes mixing.
#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/cpu/cpu_backend.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "util/thread_pool.h"

namespace sluice {

// The heads are split over the pool's threads (each thread all the tokens of its heads, so the
// causal rows' growing cost is shared evenly); every (token, head) is computed as before, alone.
void CpuBackend::mla_attend(const MlaShape& s, const Matrix& kv_b, Tensor q, Tensor cache, int64_t pos, Tensor o) {
  const int64_t H = s.n_heads, C = s.kv_lora, R = s.rope_dim, N = s.nope, V = s.v_dim, qh = N + R;
  const int64_t T = q.rows();
  ThreadPool::global().parallel_for(H, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> qabs(static_cast<size_t>(C)), ctx(static_cast<size_t>(C)), p;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = pos + t + 1;
      for (int64_t h = h0; h < h1; ++h) {
        const float* qn = q.data() + t * q.ld() + h * qh;
        const float* qpe = qn + N;
        // q_abs = W_UK[h]^T q_nope: the query expressed against the latent.
        std::fill(qabs.begin(), qabs.end(), 0.0f);
        matvec_transposed_acc(kv_b.q.slice_rows(h * (N + V), N), qn, qabs.data());
        p.resize(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) {
          const float* cj = cache.data() + j * cache.ld();
          p[size_t(j)] = (ops::dot(qabs.data(), cj, C) + ops::dot(qpe, cj + C, R)) * s.scale;
        }
        ops::softmax(p.data(), n);
        std::fill(ctx.begin(), ctx.end(), 0.0f);
        for (int64_t j = 0; j < n; ++j) ops::axpy(p[size_t(j)], cache.data() + j * cache.ld(), ctx.data(), C);
        matvec(kv_b.q.slice_rows(h * (N + V) + N, V), ctx.data(), o.data() + t * o.ld() + h * V);
      }
    }
  });
}

// Heads split over the pool's threads, as mla_attend.
void CpuBackend::gqa_attend(const GqaShape& s, const Vector& sinks, Tensor q, Tensor k, Tensor v, int64_t pos,
                            Tensor o) {
  const int64_t H = s.n_heads, KV = s.n_kv_heads, hd = s.head_dim, T = q.rows();
  const int64_t group = H / KV;
  ThreadPool::global().parallel_for(H, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> p;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t qpos = pos + t;
      const int64_t start = s.window > 0 ? std::max<int64_t>(0, qpos - s.window + 1) : 0;
      const int64_t n = qpos - start + 1;
      for (int64_t h = h0; h < h1; ++h) {
        const int64_t kvh = h / group;
        const float* qv = q.data() + t * q.ld() + h * hd;
        p.assign(size_t(n + 1), 0.0f);
        for (int64_t j = 0; j < n; ++j) p[size_t(j)] = ops::dot(qv, k.data() + (start + j) * k.ld() + kvh * hd, hd) * s.scale;
        // A sink is one extra logit in the softmax whose probability is dropped.
        if (sinks.host) p[size_t(n)] = sinks.host[h];
        ops::softmax(p.data(), sinks.host ? n + 1 : n);
        float* oh = o.data() + t * o.ld() + h * hd;
        std::fill(oh, oh + hd, 0.0f);
        for (int64_t j = 0; j < n; ++j) ops::axpy(p[size_t(j)], v.data() + (start + j) * v.ld() + kvh * hd, oh, hd);
      }
    }
  });
}

void CpuBackend::short_conv(const Vector& w, int64_t K, Tensor hist, Tensor x) {
  const int64_t T = x.rows(), C = x.cols();
  std::vector<float> seq(static_cast<size_t>((K - 1 + T) * C));
  download(hist, seq.data());
  download(x, seq.data() + (K - 1) * C);
  for (int64_t t = 0; t < T; ++t) {
    float* xr = x.data() + t * x.ld();
    for (int64_t c = 0; c < C; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < K; ++j) acc += w.host[c * K + j] * seq[size_t((t + j) * C + c)];
      xr[c] = ops::silu(acc);
    }
  }
  upload(seq.data() + T * C, hist);  // the last K-1 rows of [hist; x]
}

void CpuBackend::kda_gate(const KdaGate& g, const Vector& a_log, const Vector& dt_bias, Tensor z) {
  const int64_t H = g.n_heads, Dh = g.head_dim;
  for (int64_t t = 0; t < z.rows(); ++t) {
    float* zr = z.data() + t * z.ld();
    for (int64_t h = 0; h < H; ++h) {
      const float A = std::exp(a_log.host[h]);
      for (int64_t c = 0; c < Dh; ++c) {
        float& zz = zr[h * Dh + c];
        const float zb = zz + dt_bias.host[h * Dh + c];
        zz = g.kind == KdaGate::Softplus ? -A * ops::softplus(zb) : g.lower_bound * ops::sigmoid(A * zb);
      }
    }
  }
}

namespace {
// One token of the gated delta rule for one head; q and o may be null.
void delta_step(float* S, const float* q, const float* k, const float* v, const float* g, float beta, int64_t Dh,
                float* u, float* o) {
  for (int64_t i = 0; i < Dh; ++i) ops::scale(S + i * Dh, std::exp(g[i]), Dh);
  std::copy(v, v + Dh, u);  // u = v - S^T k
  for (int64_t i = 0; i < Dh; ++i) ops::axpy(-k[i], S + i * Dh, u, Dh);
  for (int64_t i = 0; i < Dh; ++i) ops::axpy(beta * k[i], u, S + i * Dh, Dh);
  if (!o) return;
  std::fill(o, o + Dh, 0.0f);
  for (int64_t i = 0; i < Dh; ++i) ops::axpy(q[i], S + i * Dh, o, Dh);
}
}  // namespace

void CpuBackend::delta_rule(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor S, int64_t H, int64_t Dh,
                            Tensor o) {
  std::vector<float> u(static_cast<size_t>(Dh));
  const bool out = !o.empty();
  for (int64_t t = 0; t < k.rows(); ++t)
    for (int64_t h = 0; h < H; ++h) {
      // S[i][j]: key channel i, value channel j
      delta_step(S.data() + h * Dh * S.ld(), out ? q.data() + t * q.ld() + h * Dh : nullptr,
                 k.data() + t * k.ld() + h * Dh, v.data() + t * v.ld() + h * Dh, g.data() + t * g.ld() + h * Dh,
                 beta.data()[t * beta.ld() + h], Dh, u.data(), out ? o.data() + t * o.ld() + h * Dh : nullptr);
    }
}

void CpuBackend::attn_res_mix(std::span<const Tensor> sources, const Vector& norm, const Vector& proj, float eps,
                              Tensor out) {
  // AttnRes(sources; wn, wp) per token: softmax over sources of wp . RMSNorm(V_i; wn),
  // then the weighted sum of the raw sources.
  const size_t n = sources.size();
  const int64_t T = out.rows(), D = out.cols();
  const float *wn = norm.host, *wp = proj.host;
  std::vector<float> w(n);
  for (int64_t t = 0; t < T; ++t) {
    for (size_t i = 0; i < n; ++i) {
      const float* v = sources[i].data() + t * sources[i].ld();
      double ss = 0.0, dot = 0.0;
      for (int64_t d = 0; d < D; ++d) {
        ss += double(v[d]) * v[d];
        dot += double(wp[d]) * wn[d] * v[d];
      }
      w[i] = float(dot / std::sqrt(ss / double(D) + double(eps)));
    }
    ops::softmax(w.data(), int64_t(n));
    float* o = out.data() + t * out.ld();
    std::fill(o, o + D, 0.0f);
    for (size_t i = 0; i < n; ++i) ops::axpy(w[i], sources[i].data() + t * sources[i].ld(), o, D);
  }
}

}  // namespace sluice
