// One routed expert timed on a backend over a few row counts, as the MoE block
// calls it: what --experts-on auto weighs against copying the expert to the GPU
// (engine/expert_placement.h), and what `sluice bench --kernels` prints for a
// Kimi-K2-shaped one. A routed expert beside a GPU is read from DRAM (the
// others of its pass have pushed it out of the cache), so the timing cycles
// through copies of it at distinct addresses that together exceed the
// last-level cache.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "compute/activation.h"
#include "compute/expert_source.h"

namespace sluice {

class Backend;

// `n` private copies of one expert's stored bytes (gate, up, down and their
// scales), each with its weight views moved onto its copy. Reading the
// source once here keeps page faults and drive reads out of the timing.
class ExpertCopies {
 public:
  ExpertCopies(const ExpertWeights& w, int64_t n);
  std::span<const ExpertWeights> experts() const { return experts_; }

 private:
  std::vector<std::unique_ptr<uint8_t[]>> bytes_;
  std::vector<ExpertWeights> experts_;
};

// How many copies of an expert of `bytes` exceed twice the last-level cache (at least 2).
int64_t copies_beyond_cache(uint64_t bytes);

// Seconds per call of `be`.expert_ffn over each of `rows` input rows, taking `experts` in turn: the
// best of `reps` calls after one warm-up call per count. Inputs are a fixed pseudo-random sequence.
std::vector<std::pair<int64_t, double>> time_expert_rows(Backend& be, std::span<const ExpertWeights> experts,
                                                         std::span<const int64_t> rows, int reps,
                                                         const GatedActivation& act = {});

}  // namespace sluice
