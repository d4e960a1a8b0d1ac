// Token sampling from logits: temperature, top-k, top-p, min-p with a seeded
// generator (the same seed and logits give the same tokens), plus the log
// probabilities of the chosen token and of the most likely alternatives.
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace sluice {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy (argmax)
  double top_p = 1.0;        // (0, 1]
  int64_t top_k = 0;         // 0: no limit
  double min_p = 0.0;        // [0, 1]
  uint64_t seed = 0;
  int top_logprobs = 0;  // how many alternatives to report (0..20)
};

struct TokenLogprob {
  int32_t token = 0;
  double logprob = 0;  // log-softmax of the raw logits (temperature 1, before any filtering)
};

struct Sample {
  int32_t token = 0;
  double logprob = 0;
  std::vector<TokenLogprob> top;  // params.top_logprobs entries, most likely first
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // `allowed`, when set, vetoes tokens (e.g. for constrained output); at least one must pass.
  Sample sample(const float* logits, int64_t n, const std::function<bool(int32_t)>& allowed = {});
  const SamplingParams& params() const { return p_; }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
};

}  // namespace sluice
