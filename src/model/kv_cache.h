// Growable per-layer caches in backend memory. Rows are appended as tokens are
// fed; rollback() drops rows again (speculative decoding, prefix reuse).
#pragma once
#include <cstdint>
#include <vector>

#include "compute/tensor.h"
#include "model/model.h"

namespace sluice {

// One or more row-major float tables with the same number of rows (positions).
class RowCache : public LayerState {
 public:
  RowCache(Backend& be, std::vector<int64_t> widths) : be_(be) {
    for (int64_t w : widths) tables_.emplace_back(be, 0, w);
  }
  int64_t rows() const { return rows_; }
  void resize(int64_t rows) {
    for (auto& t : tables_) t.resize_rows(rows);
    rows_ = rows;
  }
  // Rows [r0, r0 + n) of one table.
  Tensor rows(size_t table, int64_t r0, int64_t n) const { return tables_[table].row_range(r0, n); }
  void checkpoint(bool) override { marks_.push_back(rows_); }
  void rollback(int64_t keep) override {
    const int64_t at = marks_.back();
    marks_.pop_back();
    resize(at + keep);
  }
  void commit() override { marks_.pop_back(); }
  int64_t bytes() const override {
    int64_t b = 0;
    for (const auto& t : tables_) b += t.bytes();
    return b;
  }
  std::vector<SavedTensor> save() const override;
  void restore(const std::vector<SavedTensor>& saved, int64_t positions) override;

 private:
  Backend& be_;
  std::vector<Buffer> tables_;
  int64_t rows_ = 0;
  std::vector<int64_t> marks_;  // rows at each open checkpoint, innermost last
};

}  // namespace sluice
