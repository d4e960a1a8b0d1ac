#include "model/kv_cache.h"

#include "compute/backend.h"
#include "util/error.h"

namespace sluice {

std::vector<SavedTensor> RowCache::save() const {
  std::vector<SavedTensor> out;
  for (const auto& t : tables_) {
    SavedTensor s{.rows = rows_, .cols = t.cols(), .per_position = true, .values = {}};
    s.values.resize(size_t(rows_ * t.cols()));
    if (rows_ > 0) be_.download(t.row_range(0, rows_), s.values.data());
    out.push_back(std::move(s));
  }
  return out;
}

void RowCache::restore(const std::vector<SavedTensor>& saved, int64_t positions) {
  if (saved.size() != tables_.size()) fail("cache state: {} tensors saved, this layer has {}", saved.size(), tables_.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    const SavedTensor& s = saved[i];
    if (!s.per_position || s.cols != tables_[i].cols() || s.rows < positions || positions < 0 ||
        int64_t(s.values.size()) != s.rows * s.cols)
      fail("cache state: tensor {} is [{}, {}]{}, this layer needs [>= {}, {}] with a row per position", i, s.rows,
           s.cols, s.per_position ? "" : " (not per position)", positions, tables_[i].cols());
  }
  marks_.clear();
  resize(positions);
  for (size_t i = 0; i < saved.size(); ++i)
    if (positions > 0) be_.upload(saved[i].values.data(), tables_[i].row_range(0, positions));
}

}  // namespace sluice
