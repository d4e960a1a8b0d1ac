#include "compute/expert_source.h"

#include "util/error.h"

namespace sluice {

void ExpertTable::set_layer(int32_t layer, std::vector<ExpertWeights> experts) {
  if (int32_t(layers_.size()) <= layer) layers_.resize(size_t(layer) + 1);
  layers_[size_t(layer)] = std::move(experts);
}

const ExpertWeights& ExpertTable::acquire(int32_t layer, int32_t expert) {
  if (layer < 0 || layer >= int32_t(layers_.size()) || expert < 0 || expert >= int32_t(layers_[size_t(layer)].size()))
    fail("no routed expert {} in layer {}", expert, layer);
  const ExpertWeights& w = layers_[size_t(layer)][size_t(expert)];
  ++stats_.requests;
  ++stats_.hits;
  stats_.bytes_needed += expert_bytes(w);
  return w;
}

std::vector<ByteRange> weight_byte_ranges(const QMatrix& m) {
  std::vector<ByteRange> r;
  if (m.rows == 0) return r;
  r.push_back({m.data, uint64_t(m.rows * m.row_bytes)});
  if (const WeightBytes s = weight_scale_bytes(m); s.data) r.push_back({s.data, s.bytes});
  return r;
}

std::vector<ByteRange> expert_byte_ranges(const ExpertWeights& e) {
  std::vector<ByteRange> r;
  for (const Matrix* m : {&e.gate, &e.up, &e.down})
    for (auto b : weight_byte_ranges(m->q)) r.push_back(b);
  return r;
}

uint64_t expert_bytes(const ExpertWeights& e) {
  uint64_t n = 0;
  for (auto b : expert_byte_ranges(e)) n += b.len;
  return n;
}

}  // namespace sluice
