// Growable per-layer caches. Rows are appended as tokens are fed; truncate()
// rolls a sequence back (speculative decoding, prefix reuse).
#pragma once
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace sluice {

// One or more row-major float tables with the same number of rows (positions).
class RowCache : public LayerState {
 public:
  explicit RowCache(std::vector<int64_t> widths) : widths_(std::move(widths)), tables_(widths_.size()) {}
  int64_t rows() const { return rows_; }
  void resize(int64_t rows) {
    for (size_t i = 0; i < tables_.size(); ++i) tables_[i].resize(size_t(rows * widths_[i]));
    rows_ = rows;
  }
  float* row(size_t table, int64_t r) { return tables_[table].data() + r * widths_[table]; }
  const float* row(size_t table, int64_t r) const { return tables_[table].data() + r * widths_[table]; }
  void checkpoint(bool) override { marks_.push_back(rows_); }
  void rollback(int64_t keep) override {
    const int64_t at = marks_.back();
    marks_.pop_back();
    resize(at + keep);
  }
  void commit() override { marks_.pop_back(); }
  int64_t bytes() const override {
    int64_t b = 0;
    for (const auto& t : tables_) b += int64_t(t.size() * sizeof(float));
    return b;
  }

 private:
  std::vector<int64_t> widths_;
  std::vector<std::vector<float>> tables_;
  int64_t rows_ = 0;
  std::vector<int64_t> marks_;  // rows at each open checkpoint, innermost last
};

}  // namespace sluice
