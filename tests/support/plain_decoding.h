// Plain sampled decoding for the speculation tests: one token per forward pass,
// written out here so the speculative path is compared with something that
// does not share its loop (runtime/speculative.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/session.h"

namespace sluice::test {

// n tokens after `prompt`, each sampled from the logits of the one before (the last one is not fed).
inline std::vector<int32_t> sample_plainly(Session& s, const std::vector<int32_t>& prompt, int64_t n,
                                           const SamplingParams& p) {
  Sampler sampler(p);
  const int64_t V = s.model().info().vocab;
  std::vector<float> logits = s.feed(prompt);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(sampler.sample(logits.data(), V).token);
    if (i + 1 < n) logits = s.feed({out.back()});
  }
  return out;
}

}  // namespace sluice::test
