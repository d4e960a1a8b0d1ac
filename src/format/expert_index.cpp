#include "format/expert_index.h"

#include <algorithm>

#include <fmt/ranges.h>

#include "util/error.h"

namespace sluice {

std::vector<ExpertExtent> merge_extents(std::vector<ExpertExtent> v) {
  std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.file != b.file ? a.file < b.file : a.offset < b.offset; });
  std::vector<ExpertExtent> out;
  for (const auto& e : v) {
    if (!out.empty() && out.back().file == e.file && e.offset <= out.back().offset + out.back().length)
      out.back().length = std::max(out.back().offset + out.back().length, e.offset + e.length) - out.back().offset;
    else
      out.push_back(e);
  }
  return out;
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), std::string::npos, suffix) == 0;
}

// Whole-tensor ranges of one stored projection: the weight, then its scales,
// as the builders' WeightLoader reads them.
void projection_tensors(const Checkpoint& ck, const std::string& base, std::vector<std::string>& out) {
  if (ck.has(base + ".weight")) {
    out.push_back(base + ".weight");
    const DType dt = ck.get(base + ".weight").dtype();
    if (dt == DType::F8_E4M3 && ck.has(base + ".weight_scale_inv")) out.push_back(base + ".weight_scale_inv");
    if (dt == DType::I8 && ck.has(base + ".weight_row_scale")) out.push_back(base + ".weight_row_scale");
    return;
  }
  if (!ck.has(base + ".weight_packed"))
    fail("{}: checkpoint has no weight for '{}' (looked for .weight and .weight_packed)", ck.dir(), base);
  out.push_back(base + ".weight_packed");
  if (ck.has(base + ".weight_scale")) out.push_back(base + ".weight_scale");
}

ExpertExtent extent_of(const Checkpoint& ck, const std::string& name, uint64_t skip, uint64_t len) {
  TensorView t = ck.get(name);
  return {ck.file_index(name), t.file_offset + skip, len};
}

}  // namespace

ExpertIndex::ExpertIndex(const Config& cfg, const Checkpoint& ck) : layout_(model_layout(cfg)) {
  const ModelLayout& L = layout_;
  int64_t last_moe = -1;
  for (int64_t l = 0; l < L.n_layers; ++l)
    if (L.is_moe(l)) last_moe = l;
  extents_.resize(size_t(last_moe + 1));
  tensors_.resize(size_t(last_moe + 1));
  for (int64_t l = 0; l <= last_moe; ++l) {
    if (!L.is_moe(l)) continue;
    auto& ex = extents_[size_t(l)];
    auto& tn = tensors_[size_t(l)];
    ex.resize(size_t(L.n_experts));
    tn.resize(size_t(L.n_experts));
    if (L.experts == ModelLayout::Experts::PerExpert) {
      for (int64_t e = 0; e < L.n_experts; ++e) {
        for (int which = 0; which < 3; ++which) projection_tensors(ck, L.prefix + L.expert_base(l, e, which), tn[size_t(e)]);
        std::vector<ExpertExtent> raw;
        for (const auto& n : tn[size_t(e)]) {
          raw.push_back(extent_of(ck, n, 0, ck.get(n).nbytes()));
          expert_tensors_.insert(n);
        }
        ex[size_t(e)] = merge_extents(std::move(raw));
      }
    } else {
      std::vector<std::vector<ExpertExtent>> raw(size_t(L.n_experts));
      for (int which = 0; which < 2; ++which) {
        const std::string b = L.prefix + L.stacked_blocks(l, which), s = L.prefix + L.stacked_scales(l, which);
        TensorView bt = ck.get(b), st = ck.get(s);
        if (bt.shape().size() != 4 || bt.shape()[0] != L.n_experts || st.shape().size() != 3 ||
            st.shape()[0] != L.n_experts || st.shape()[1] != bt.shape()[1] || st.shape()[2] != bt.shape()[2])
          fail("{}: stacked expert tensors '{}' [{}] and '{}' [{}] do not hold {} experts", ck.dir(), b,
               fmt::join(bt.shape(), ", "), s, fmt::join(st.shape(), ", "), L.n_experts);
        expert_tensors_.insert(b);
        expert_tensors_.insert(s);
        const uint64_t per_b = bt.nbytes() / uint64_t(L.n_experts), per_s = st.nbytes() / uint64_t(L.n_experts);
        for (int64_t e = 0; e < L.n_experts; ++e) {
          raw[size_t(e)].push_back(extent_of(ck, b, uint64_t(e) * per_b, per_b));
          raw[size_t(e)].push_back(extent_of(ck, s, uint64_t(e) * per_s, per_s));
        }
      }
      for (int64_t e = 0; e < L.n_experts; ++e) ex[size_t(e)] = merge_extents(std::move(raw[size_t(e)]));
    }
  }

  // Spine: model tensors not inside any expert's extents.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> covered(ck.files().size());
  for (const auto& layer : extents_)
    for (const auto& expert : layer)
      for (const auto& x : expert) covered[size_t(x.file)].push_back({x.offset, x.offset + x.length});
  for (auto& c : covered) {
    std::sort(c.begin(), c.end());
    std::vector<std::pair<uint64_t, uint64_t>> m;
    for (auto iv : c) {
      if (!m.empty() && iv.first <= m.back().second) m.back().second = std::max(m.back().second, iv.second);
      else m.push_back(iv);
    }
    c = std::move(m);
  }
  for (const auto& name : ck.names()) {
    if (name.compare(0, L.prefix.size(), L.prefix) != 0 || name.compare(0, 2, "__") == 0) continue;
    if (layer_of_tensor(name) >= L.n_layers || ends_with(name, ".rotary_emb.inv_freq")) continue;
    TensorView t = ck.get(name);
    const auto& c = covered[size_t(ck.file_index(name))];
    auto it = std::upper_bound(c.begin(), c.end(), std::make_pair(t.file_offset, UINT64_MAX));
    const bool in_expert = t.nbytes() > 0 && it != c.begin() && std::prev(it)->first <= t.file_offset &&
                           t.file_offset + t.nbytes() <= std::prev(it)->second;
    if (in_expert) continue;
    spine_.push_back(name);
    spine_bytes_ += t.nbytes();
  }
}

uint64_t ExpertIndex::bytes(int32_t layer, int32_t expert) const {
  uint64_t n = 0;
  for (const auto& x : extents(layer, expert)) n += x.length;
  return n;
}

uint64_t ExpertIndex::total_bytes() const {
  uint64_t n = 0;
  for (int32_t l = 0; l < layers(); ++l)
    for (int32_t e = 0; e < experts(l); ++e) n += bytes(l, e);
  return n;
}

int64_t ExpertIndex::count() const {
  int64_t n = 0;
  for (int32_t l = 0; l < layers(); ++l) n += experts(l);
  return n;
}

}  // namespace sluice
