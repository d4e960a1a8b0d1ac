#include "model/kda_attention.h"

#include <cmath>

#include "util/error.h"

namespace sluice {

namespace {
struct KdaState : LayerState {
  // Last (kernel-1) projection rows of q, k, v (oldest first), and the recurrent state.
  Buffer hist_q, hist_k, hist_v;
  Buffer S;  // [H*D, D]: per head h, rows [h*D, (h+1)*D)
  // Rollback support. Checkpoints nest (the server keeps one at the end of a
  // prompt while speculation sets and clears its own per verification pass):
  // each holds a copy of the state when it was set and how many tokens had
  // been recorded by then. While a recording mark is open, every token fed
  // records its raw projections (for the convolution history) and the inputs
  // of the state update (q is not needed to replay the state and is not
  // kept), so that any prefix of them can be kept. A mark that does not
  // record can only be returned to exactly (keep 0).
  struct Mark {
    Buffer hist_q, hist_k, hist_v, S;
    int64_t recorded = 0;
    bool record = true;
  };
  std::vector<Mark> marks;
  bool recording() const {
    for (const auto& m : marks)
      if (m.record) return true;
    return false;
  }
  Buffer rec_pq, rec_pk, rec_pv;  // raw projections [n, C]
  Buffer rec_k, rec_v, rec_g;     // recurrence inputs [n, C]
  Buffer rec_beta;                // [n, H]
  Backend& be;
  int64_t H = 0, Dh = 0, C = 0;

  KdaState(Backend& b, int64_t heads, int64_t head_dim, int64_t kernel)
      : hist_q(b, kernel - 1, heads * head_dim), hist_k(b, kernel - 1, heads * head_dim),
        hist_v(b, kernel - 1, heads * head_dim), S(b, heads * head_dim, head_dim), rec_pq(b, 0, heads * head_dim),
        rec_pk(b, 0, heads * head_dim), rec_pv(b, 0, heads * head_dim), rec_k(b, 0, heads * head_dim),
        rec_v(b, 0, heads * head_dim), rec_g(b, 0, heads * head_dim), rec_beta(b, 0, heads), be(b), H(heads),
        Dh(head_dim), C(heads * head_dim) {}

  int64_t recorded() const { return rec_beta.rows(); }
  int64_t bytes() const override {
    int64_t n = hist_q.bytes() + hist_k.bytes() + hist_v.bytes() + S.bytes();
    for (const auto& m : marks) n += m.hist_q.bytes() + m.hist_k.bytes() + m.hist_v.bytes() + m.S.bytes();
    for (const auto* v : {&rec_pq, &rec_pk, &rec_pv, &rec_k, &rec_v, &rec_g, &rec_beta}) n += v->bytes();
    return n;
  }
  bool needs_records() const override { return true; }
  std::vector<SavedTensor> save() const override {
    std::vector<SavedTensor> out;
    for (const Buffer* b : {&hist_q, &hist_k, &hist_v, &S}) {
      SavedTensor t{.rows = b->rows(), .cols = b->cols(), .per_position = false, .values = {}};
      t.values.resize(size_t(b->rows() * b->cols()));
      if (!t.values.empty()) be.download(*b, t.values.data());
      out.push_back(std::move(t));
    }
    return out;
  }
  void restore(const std::vector<SavedTensor>& saved, int64_t /*positions*/) override {
    Buffer* const mine[] = {&hist_q, &hist_k, &hist_v, &S};
    if (saved.size() != 4) fail("KDA state: {} tensors saved, this layer has 4", saved.size());
    for (size_t i = 0; i < 4; ++i) {
      const SavedTensor& t = saved[i];
      if (t.per_position || t.rows != mine[i]->rows() || t.cols != mine[i]->cols() ||
          int64_t(t.values.size()) != t.rows * t.cols)
        fail("KDA state: tensor {} is [{}, {}]{}, this layer's is [{}, {}]", i, t.rows, t.cols,
             t.per_position ? " per position" : "", mine[i]->rows(), mine[i]->cols());
    }
    marks.clear();
    drop_records(0);
    for (size_t i = 0; i < 4; ++i)
      if (!saved[i].values.empty()) be.upload(saved[i].values.data(), *mine[i]);
  }
  void checkpoint(bool record) override {
    marks.push_back({hist_q.clone(), hist_k.clone(), hist_v.clone(), S.clone(), recorded(), record});
  }
  void rollback(int64_t keep) override;
  void commit() override {
    marks.pop_back();
    drop_records(marks.empty() ? 0 : recorded());
  }
  // Keeps the first `n` records, none once no recording mark is left.
  void drop_records(int64_t n) {
    if (!recording()) n = 0;
    for (auto* v : {&rec_pq, &rec_pk, &rec_pv, &rec_k, &rec_v, &rec_g, &rec_beta}) v->resize_rows(n);
  }
  // Appends rows to a record.
  void record(Buffer& rec, Tensor rows) {
    const int64_t at = rec.rows();
    rec.resize_rows(at + rows.rows());
    be.copy(rows, rec.row_range(at, rows.rows()));
  }
  // hist becomes the last hist.rows() rows of [cp; rec rows [from, from + keep)].
  void keep_history(Buffer& hist, const Buffer& cp, const Buffer& rec, int64_t from, int64_t keep) {
    const int64_t K1 = hist.rows();
    if (K1 == 0) return;
    if (keep >= K1) {
      be.copy(rec.row_range(from + keep - K1, K1), hist);
    } else {
      be.copy(cp.row_range(keep, K1 - keep), hist.row_range(0, K1 - keep));
      if (keep > 0) be.copy(rec.row_range(from, keep), hist.row_range(K1 - keep, keep));
    }
  }
};

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
  if (keep > 0)
    be.delta_rule(Tensor(), rec_k.row_range(m.recorded, keep), rec_v.row_range(m.recorded, keep),
                  rec_g.row_range(m.recorded, keep), rec_beta.row_range(m.recorded, keep), S, H, Dh, Tensor());
  keep_history(hist_q, m.hist_q, rec_pq, m.recorded, keep);
  keep_history(hist_k, m.hist_k, rec_pk, m.recorded, keep);
  keep_history(hist_v, m.hist_v, rec_pv, m.recorded, keep);
  // Keep what an enclosing checkpoint still needs.
  drop_records(m.recorded + keep);
}

}  // namespace

std::unique_ptr<LayerState> KdaAttention::new_state() const {
  return std::make_unique<KdaState>(be_, s_.n_heads, s_.head_dim, s_.conv_kernel);
}

void KdaAttention::forward(Tensor x, std::span<const SequenceRows> seqs, Tensor out) const {
  const int64_t H = s_.n_heads, Dh = s_.head_dim, C = H * Dh, T = x.rows(), K = s_.conv_kernel;
  Buffer q(be_, T, C), k(be_, T, C), v(be_, T, C);
  be_.matmul(w_.q, x, q);
  be_.matmul(w_.k, x, k);
  be_.matmul(w_.v, x, v);
  for (const SequenceRows& sq : seqs) {
    auto& st = static_cast<KdaState&>(*sq.state);
    const Tensor qs = q.row_range(sq.row0, sq.rows), ks = k.row_range(sq.row0, sq.rows), vs = v.row_range(sq.row0, sq.rows);
    if (st.recording()) {
      st.record(st.rec_pq, qs);
      st.record(st.rec_pk, ks);
      st.record(st.rec_pv, vs);
    }
    be_.short_conv(w_.q_conv, K, st.hist_q, qs);
    be_.short_conv(w_.k_conv, K, st.hist_k, ks);
    be_.short_conv(w_.v_conv, K, st.hist_v, vs);
  }

  // Decay gate g [T, C] and beta [T, H].
  const int64_t r = w_.f_a.rows();
  Buffer fa(be_, T, r), z(be_, T, C), beta(be_, T, H);
  be_.matmul(w_.f_a, x, fa);
  be_.matmul(w_.f_b, fa, z);
  be_.matmul(w_.b, x, beta);
  const KdaGate gate_spec{.kind = s_.gate == KdaSpec::Softplus ? KdaGate::Softplus : KdaGate::LowerBound,
                          .lower_bound = s_.lower_bound, .n_heads = H, .head_dim = Dh};
  be_.kda_gate(gate_spec, w_.a_log, w_.dt_bias, z);
  be_.sigmoid(beta);
  // Output gate [T, C].
  Buffer gate(be_, T, C);
  if (!w_.g.empty()) {
    be_.matmul(w_.g, x, gate);
  } else {
    Buffer ga(be_, T, w_.g_a.rows());
    be_.matmul(w_.g_a, x, ga);
    be_.matmul(w_.g_b, ga, gate);
  }

  be_.l2norm(q, Dh, s_.l2_eps, 1.0f / std::sqrt(float(Dh)));
  be_.l2norm(k, Dh, s_.l2_eps, 1.0f);
  Buffer o(be_, T, C);
  for (const SequenceRows& sq : seqs) {
    auto& st = static_cast<KdaState&>(*sq.state);
    auto rows = [&](const Buffer& b) { return b.row_range(sq.row0, sq.rows); };
    if (st.recording()) {
      st.record(st.rec_k, rows(k));
      st.record(st.rec_v, rows(v));
      st.record(st.rec_g, rows(z));
      st.record(st.rec_beta, rows(beta));
    }
    be_.delta_rule(rows(q), rows(k), rows(v), rows(z), rows(beta), st.S, H, Dh, rows(o));
  }
  be_.rmsnorm(o, w_.o_norm, s_.norm_eps, o, Dh);
  be_.mul_sigmoid(gate, o);
  be_.matmul(w_.o, o, out);
}

}  // namespace sluice
