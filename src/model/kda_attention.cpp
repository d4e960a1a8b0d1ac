#include "model/kda_attention.h"

#include <cmath>

#include "util/error.h"

#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace sluice {

namespace {
struct KdaState : LayerState {
  // Last (kernel-1) projection rows of q, k, v (oldest first), and the recurrent state.
  std::vector<float> hist_q, hist_k, hist_v;
  std::vector<float> S;  // [H][D][D]
  // Rollback support. Checkpoints nest (the server keeps one at the end of a
  // prompt while speculation sets and clears its own per verification pass):
  // each holds a copy of the state when it was set and how many tokens had
  // been recorded by then. While a recording mark is open, every token fed
  // records its raw projections (for the convolution history) and the inputs
  // of the state update (q is not needed to replay the state and is not
  // kept), so that any prefix of them can be kept. A mark that does not
  // record can only be returned to exactly (keep 0).
  struct Mark {
    std::vector<float> hist_q, hist_k, hist_v, S;
    int64_t recorded = 0;
    bool record = true;
  };
  std::vector<Mark> marks;
  bool recording() const {
    for (const auto& m : marks)
      if (m.record) return true;
    return false;
  }
  std::vector<float> rec_pq, rec_pk, rec_pv;  // raw projections [n, C]
  std::vector<float> rec_k, rec_v, rec_g;     // recurrence inputs [n, C]
  std::vector<float> rec_beta;                // [n, H]
  int64_t H = 0, Dh = 0, C = 0;
  int64_t recorded() const { return H ? int64_t(rec_beta.size()) / H : 0; }
  int64_t bytes() const override {
    size_t n = hist_q.size() + hist_k.size() + hist_v.size() + S.size();
    for (const auto& m : marks) n += m.hist_q.size() + m.hist_k.size() + m.hist_v.size() + m.S.size();
    for (const auto* v : {&rec_pq, &rec_pk, &rec_pv, &rec_k, &rec_v, &rec_g, &rec_beta}) n += v->size();
    return int64_t(n * sizeof(float));
  }
  bool needs_records() const override { return true; }
  void checkpoint(bool record) override { marks.push_back({hist_q, hist_k, hist_v, S, recorded(), record}); }
  void rollback(int64_t keep) override;
  void commit() override {
    marks.pop_back();
    drop_records(marks.empty() ? 0 : recorded());
  }
  // Keeps the first `n` records, none once no recording mark is left.
  void drop_records(int64_t n) {
    if (!recording()) n = 0;
    for (auto* v : {&rec_pq, &rec_pk, &rec_pv, &rec_k, &rec_v, &rec_g}) v->resize(size_t(n * C));
    rec_beta.resize(size_t(n * H));
  }
};

// One token of the gated delta rule for one head; o may be null.
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

// The last hist.size()/C rows of [cp; rec[0..keep)].
void keep_history(std::vector<float>& hist, const std::vector<float>& cp, const float* rec, int64_t keep, int64_t C) {
  std::vector<float> seq(cp);
  seq.insert(seq.end(), rec, rec + keep * C);
  std::copy(seq.end() - int64_t(hist.size()), seq.end(), hist.begin());
}

void KdaState::rollback(int64_t keep) {
  if (marks.empty()) fail("KDA state: rollback without a checkpoint");
  Mark m = std::move(marks.back());
  marks.pop_back();
  const int64_t n = m.record ? recorded() - m.recorded : 0;
  if (keep < 0 || keep > n)
    fail("KDA state: cannot keep {} tokens fed since a checkpoint that {}", keep,
         m.record ? fmt::format("recorded {}", n) : std::string("did not record them"));
  // Replaying the recorded updates from the copy gives the state bit for bit.
  S = std::move(m.S);
  std::vector<float> u(static_cast<size_t>(Dh));
  for (int64_t t = m.recorded; t < m.recorded + keep; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const size_t o = size_t(t * C + h * Dh);
      delta_step(S.data() + h * Dh * Dh, nullptr, &rec_k[o], &rec_v[o], &rec_g[o], rec_beta[size_t(t * H + h)], Dh,
                 u.data(), nullptr);
    }
  const size_t base = size_t(m.recorded * C);
  keep_history(hist_q, m.hist_q, rec_pq.data() + base, keep, C);
  keep_history(hist_k, m.hist_k, rec_pk.data() + base, keep, C);
  keep_history(hist_v, m.hist_v, rec_pv.data() + base, keep, C);
  // Keep what an enclosing checkpoint still needs.
  drop_records(m.recorded + keep);
}

// Causal depthwise convolution over [history; x] followed by SiLU; updates the history.
void conv_silu(const float* w, int64_t K, int64_t C, std::vector<float>& hist, float* x, int64_t T) {
  std::vector<float> seq(static_cast<size_t>((K - 1 + T) * C));
  std::copy(hist.begin(), hist.end(), seq.begin());
  std::copy(x, x + T * C, seq.begin() + (K - 1) * C);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < K; ++j) acc += w[c * K + j] * seq[size_t((t + j) * C + c)];
      x[t * C + c] = ops::silu(acc);
    }
  std::copy(seq.end() - (K - 1) * C, seq.end(), hist.begin());
}

void l2norm(float* x, int64_t n, float eps, float mul) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float inv = float(1.0 / std::sqrt(ss + eps)) * mul;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace

std::unique_ptr<LayerState> KdaAttention::new_state() const {
  auto st = std::make_unique<KdaState>();
  const int64_t C = s_.n_heads * s_.head_dim;
  st->H = s_.n_heads;
  st->Dh = s_.head_dim;
  st->C = C;
  st->hist_q.assign(size_t((s_.conv_kernel - 1) * C), 0.0f);
  st->hist_k = st->hist_q;
  st->hist_v = st->hist_q;
  st->S.assign(size_t(s_.n_heads * s_.head_dim * s_.head_dim), 0.0f);
  return st;
}

void KdaAttention::forward(const float* x, int64_t T, int64_t /*pos*/, LayerState& state, float* out) const {
  auto& st = static_cast<KdaState&>(state);
  const int64_t H = s_.n_heads, Dh = s_.head_dim, C = H * Dh, D = w_.q.cols, K = s_.conv_kernel;
  std::vector<float> q(size_t(T * C)), k(size_t(T * C)), v(size_t(T * C));
  matmul(w_.q, x, T, D, q.data(), C);
  matmul(w_.k, x, T, D, k.data(), C);
  matmul(w_.v, x, T, D, v.data(), C);
  if (st.recording()) {
    st.rec_pq.insert(st.rec_pq.end(), q.begin(), q.end());
    st.rec_pk.insert(st.rec_pk.end(), k.begin(), k.end());
    st.rec_pv.insert(st.rec_pv.end(), v.begin(), v.end());
  }
  conv_silu(w_.q_conv, K, C, st.hist_q, q.data(), T);
  conv_silu(w_.k_conv, K, C, st.hist_k, k.data(), T);
  conv_silu(w_.v_conv, K, C, st.hist_v, v.data(), T);

  // Decay gate g [T, C] and beta [T, H].
  const int64_t r = w_.f_a.rows;
  std::vector<float> fa(size_t(T * r)), z(size_t(T * C)), beta(size_t(T * H));
  matmul(w_.f_a, x, T, D, fa.data(), r);
  matmul(w_.f_b, fa.data(), T, r, z.data(), C);
  matmul(w_.b, x, T, D, beta.data(), H);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const float A = std::exp(w_.a_log[size_t(h)]);
      for (int64_t c = 0; c < Dh; ++c) {
        float& zz = z[size_t(t * C + h * Dh + c)];
        const float zb = zz + w_.dt_bias[h * Dh + c];
        zz = s_.gate == KdaSpec::Softplus ? -A * ops::softplus(zb) : s_.lower_bound * ops::sigmoid(A * zb);
      }
      beta[size_t(t * H + h)] = ops::sigmoid(beta[size_t(t * H + h)]);
    }
  }
  // Output gate [T, C].
  std::vector<float> gate(size_t(T * C));
  if (w_.g.rows > 0) {
    matmul(w_.g, x, T, D, gate.data(), C);
  } else {
    const int64_t gr = w_.g_a.rows;
    std::vector<float> ga(size_t(T * gr));
    matmul(w_.g_a, x, T, D, ga.data(), gr);
    matmul(w_.g_b, ga.data(), T, gr, gate.data(), C);
  }

  std::vector<float> o(static_cast<size_t>(T * C)), u(static_cast<size_t>(Dh));
  const float qscale = 1.0f / std::sqrt(float(Dh));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      l2norm(q.data() + t * C + h * Dh, Dh, s_.l2_eps, qscale);
      l2norm(k.data() + t * C + h * Dh, Dh, s_.l2_eps, 1.0f);
    }
  if (st.recording()) {
    st.rec_k.insert(st.rec_k.end(), k.begin(), k.end());
    st.rec_v.insert(st.rec_v.end(), v.begin(), v.end());
    st.rec_g.insert(st.rec_g.end(), z.begin(), z.end());
    st.rec_beta.insert(st.rec_beta.end(), beta.begin(), beta.end());
  }
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      float* qh = q.data() + t * C + h * Dh;
      float* kh = k.data() + t * C + h * Dh;
      const float* vh = v.data() + t * C + h * Dh;
      const float* gh = z.data() + t * C + h * Dh;
      float* S = st.S.data() + h * Dh * Dh;  // S[i][j]: key channel i, value channel j
      const float b = beta[size_t(t * H + h)];
      float* oh = o.data() + t * C + h * Dh;
      delta_step(S, qh, kh, vh, gh, b, Dh, u.data(), oh);
      ops::rmsnorm(oh, w_.o_norm, s_.norm_eps, Dh, oh);
      const float* gg = gate.data() + t * C + h * Dh;
      for (int64_t c = 0; c < Dh; ++c) oh[c] *= ops::sigmoid(gg[c]);
    }
  }
  matmul(w_.o, o.data(), T, C, out, w_.o.rows);
}

}  // namespace sluice
