#include "compute/backend.h"

#include <cmath>
#include <vector>

#include "util/error.h"

namespace sluice {

std::string_view op_name(Op op) {
  switch (op) {
    case Op::MlaAttend: return "mla_attend";
    case Op::GqaAttend: return "gqa_attend";
    case Op::ShortConv: return "short_conv";
    case Op::KdaGate: return "kda_gate";
    case Op::DeltaRule: return "delta_rule";
    case Op::AttnResMix: return "attn_res_mix";
    case Op::GatedInterleaved: return "gated_interleaved";
  }
  return "?";
}

bool Backend::supports(Op) const { return false; }

void require_op(const Backend& be, Op op, std::string_view user) {
  if (be.supports(op) || be.host_fallback()) return;
  fail("the {} backend cannot run {}: it does not implement {} and does not fall back to the CPU for the ops it "
       "lacks",
       be.name(), user, op_name(op));
}

void Backend::expert_ffns(std::span<const ExpertWeights* const> experts, std::span<const int64_t> offsets,
                          const GatedActivation& act, Tensor x, Tensor y) {
  if (offsets.size() != experts.size() + 1)
    fail("internal: expert_ffns with {} experts and {} offsets", experts.size(), offsets.size());
  for (size_t i = 0; i < experts.size(); ++i) {
    const int64_t r0 = offsets[i], n = offsets[i + 1] - offsets[i];
    if (n > 0) expert_ffn(*experts[i], act, x.row_range(r0, n), y.row_range(r0, n));
  }
}

int64_t Backend::first_nonfinite(Tensor x) {
  std::vector<float> host(size_t(x.rows() * x.cols()));
  download(x, host.data());
  for (size_t i = 0; i < host.size(); ++i)
    if (!std::isfinite(host[i])) return int64_t(i);
  return -1;
}

void Backend::watch_nonfinite(Tensor x, int64_t tag) {
  if (watched_.tag >= 0 && watched_.tag <= tag) return;
  const int64_t i = first_nonfinite(x);
  if (i < 0) return;
  std::vector<float> row(size_t(x.cols()));
  download(x.row_range(i / x.cols(), 1), row.data());
  watched_ = {tag, i, row[size_t(i % x.cols())]};
}

Backend::NonFinite Backend::take_nonfinite() {
  const NonFinite r = watched_;
  watched_ = NonFinite{};
  return r;
}

}  // namespace sluice
