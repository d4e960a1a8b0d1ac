// The host fallback: the base class's versions of the architecture ops
// (compute/backend.h), which every backend inherits for the ops it does not
// compute itself. The op's tensors are downloaded into packed host memory, the
// CPU backend's op runs over those copies and the weights' host bytes, and the
// tensors it wrote are uploaded back: the CPU's bits, at the price of a round
// trip of every tensor the op touches (MLA's whole latent cache at each call).
#include <deque>
#include <span>
#include <vector>

#include "compute/backend.h"
#include "util/error.h"

namespace sluice {

namespace {

// The host copies of one call's tensors. The same view given twice gets the
// same copy, so an op that writes a tensor it also reads (in place) sees its
// own writes, as on the CPU.
class HostCopies {
 public:
  HostCopies(Backend& be, Op op) : be_(be), op_(op) {
    if (!be.host_fallback())
      fail("internal: the {} backend runs {} through the host fallback, which it refuses", be.name(), op_name(op));
    be.count_host_fallback(op);
  }

  // A host copy of t (packed: ld == cols); an empty view stays empty.
  Tensor in(Tensor t) {
    if (t.empty()) return Tensor(nullptr, t.rows(), t.cols(), t.cols());
    for (const Copy& c : copies_)
      if (c.dev.data() == t.data() && c.dev.rows() == t.rows() && c.dev.cols() == t.cols() && c.dev.ld() == t.ld())
        return c.host;
    std::vector<float>& buf = buffers_.emplace_back(size_t(t.rows() * t.cols()));
    be_.download(t, buf.data());
    const Tensor host(buf.data(), t.rows(), t.cols(), t.cols());
    copies_.push_back({t, host});
    return host;
  }
  // Writes the host copy of dev (from in()) back to the backend.
  void out(Tensor dev) {
    if (dev.empty()) return;
    be_.upload(in(dev).data(), dev);
  }

  // The weights as the CPU reads them: their host bytes, which every handle keeps unless
  // it was made without them.
  Matrix weight(const Matrix& m) const {
    if (m.q.rows > 0 && m.q.data == nullptr) no_host_bytes("matrix");
    return host_matrix(m.q);
  }
  Vector weight(const Vector& v) const {
    if (!v.empty() && v.host == nullptr) no_host_bytes("vector");
    return Vector{v.host, nullptr, v.n};
  }

 private:
  struct Copy {
    Tensor dev, host;
  };
  [[noreturn]] void no_host_bytes(const char* what) const {
    fail("the {} backend does not compute {} itself, and its host fallback needs the weights on the host: a weight "
         "{} of this call has only the backend's copy",
         be_.name(), op_name(op_), what);
  }
  Backend& be_;
  Op op_;
  std::deque<std::vector<float>> buffers_;  // stable addresses
  std::vector<Copy> copies_;
};

}  // namespace

void Backend::mla_attend(const MlaShape& s, const Matrix& kv_b, Tensor q, Tensor cache, int64_t pos, Tensor o) {
  HostCopies h(*this, Op::MlaAttend);
  cpu_backend().mla_attend(s, h.weight(kv_b), h.in(q), h.in(cache), pos, h.in(o));
  h.out(o);
}

void Backend::gqa_attend(const GqaShape& s, const Vector& sinks, Tensor q, Tensor k, Tensor v, int64_t pos,
                         Tensor o) {
  HostCopies h(*this, Op::GqaAttend);
  cpu_backend().gqa_attend(s, h.weight(sinks), h.in(q), h.in(k), h.in(v), pos, h.in(o));
  h.out(o);
}

void Backend::short_conv(const Vector& w, int64_t K, Tensor hist, Tensor x) {
  HostCopies h(*this, Op::ShortConv);
  cpu_backend().short_conv(h.weight(w), K, h.in(hist), h.in(x));
  h.out(x);
  h.out(hist);
}

void Backend::kda_gate(const KdaGate& g, const Vector& a_log, const Vector& dt_bias, Tensor z) {
  HostCopies h(*this, Op::KdaGate);
  cpu_backend().kda_gate(g, h.weight(a_log), h.weight(dt_bias), h.in(z));
  h.out(z);
}

void Backend::delta_rule(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor S, int64_t heads,
                         int64_t head_dim, Tensor o) {
  HostCopies h(*this, Op::DeltaRule);
  cpu_backend().delta_rule(h.in(q), h.in(k), h.in(v), h.in(g), h.in(beta), h.in(S), heads, head_dim, h.in(o));
  h.out(S);
  h.out(o);
}

void Backend::attn_res_mix(std::span<const Tensor> sources, const Vector& norm, const Vector& proj, float eps,
                           Tensor out) {
  HostCopies h(*this, Op::AttnResMix);
  std::vector<Tensor> host_sources;
  host_sources.reserve(sources.size());
  for (const Tensor& s : sources) host_sources.push_back(h.in(s));
  cpu_backend().attn_res_mix(host_sources, h.weight(norm), h.weight(proj), eps, h.in(out));
  h.out(out);
}

void Backend::gated_interleaved(const GatedActivation& act, Tensor gu, Tensor out) {
  HostCopies h(*this, Op::GatedInterleaved);
  cpu_backend().gated_interleaved(act, h.in(gu), h.in(out));
  h.out(out);
}

}  // namespace sluice
