#include "io/spine_layout.h"

#include <algorithm>

namespace sluice {

namespace {
std::vector<ExpertExtent> merge(std::vector<ExpertExtent> v) {
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
}  // namespace

int64_t SpineLayout::layer_of(const std::string& name) {
  auto p = name.find("layers.");
  if (p == std::string::npos) return -1;
  p += 7;
  int64_t v = 0;
  bool digit = false;
  while (p < name.size() && name[p] >= '0' && name[p] <= '9') v = v * 10 + (name[p++] - '0'), digit = true;
  return digit && p < name.size() && name[p] == '.' ? v : -1;
}

SpineLayout::SpineLayout(const Checkpoint& ck, const std::vector<std::string>& names, const ExpertTable& table) {
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> covered(ck.files().size());
  for (int32_t l = 0; l < table.layers(); ++l)
    for (int32_t e = 0; e < table.experts(l); ++e)
      for (const auto& x : expert_extents(ck, table.at(l, e)))
        covered[size_t(x.file)].push_back({x.offset, x.offset + x.length});
  for (auto& c : covered) {
    std::sort(c.begin(), c.end());
    std::vector<std::pair<uint64_t, uint64_t>> m;
    for (auto iv : c) {
      if (!m.empty() && iv.first <= m.back().second) m.back().second = std::max(m.back().second, iv.second);
      else m.push_back(iv);
    }
    c = std::move(m);
  }
  std::map<int64_t, std::vector<ExpertExtent>> raw;
  for (const auto& name : names) {
    TensorView t = ck.get(name);
    size_t fi = 0;
    while (fi < ck.files().size() && ck.files()[fi]->path() != *t.file) ++fi;
    const auto& c = covered[fi];
    auto it = std::upper_bound(c.begin(), c.end(), std::make_pair(t.file_offset, UINT64_MAX));
    const bool in_expert = t.nbytes() > 0 && it != c.begin() && std::prev(it)->first <= t.file_offset &&
                           t.file_offset + t.nbytes() <= std::prev(it)->second;
    if (in_expert) continue;
    tensors_.push_back(t);
    const int64_t l = layer_of(name);
    max_layer_ = std::max(max_layer_, l);
    if (t.nbytes()) raw[l].push_back({int32_t(fi), t.file_offset, t.nbytes()});
  }
  for (auto& [l, v] : raw) by_layer_[l] = merge(std::move(v));
}

const std::vector<ExpertExtent>& SpineLayout::layer_extents(int64_t l) const {
  static const std::vector<ExpertExtent> none;
  auto it = by_layer_.find(l);
  return it == by_layer_.end() ? none : it->second;
}

uint64_t SpineLayout::layer_bytes(int64_t l) const {
  uint64_t n = 0;
  for (const auto& e : layer_extents(l)) n += e.length;
  return n;
}

uint64_t SpineLayout::total_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n += t.nbytes();
  return n;
}

}  // namespace sluice
