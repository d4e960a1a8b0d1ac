#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "util/error.h"

namespace sluice {

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {
  if (!(p.temperature >= 0)) fail("temperature must be >= 0, got {}", p.temperature);
  if (!(p.top_p > 0 && p.top_p <= 1)) fail("top_p must be in (0, 1], got {}", p.top_p);
  if (p.top_k < 0) fail("top_k must be >= 0, got {}", p.top_k);
  if (!(p.min_p >= 0 && p.min_p <= 1)) fail("min_p must be in [0, 1], got {}", p.min_p);
  if (p.top_logprobs < 0) fail("top_logprobs must be >= 0, got {}", p.top_logprobs);
}

namespace {

// The candidates' place drawn at the temperature (candidates sorted by
// probability when a filter is on), after min_p and top_p cut their tail.
size_t draw_tempered(const float* logits, const std::vector<int32_t>& cand, const SamplingParams& p,
                     std::mt19937_64& rng) {
  // Tempered probabilities over the candidates.
  const double inv_t = 1.0 / p.temperature;
  double top = -std::numeric_limits<double>::infinity();
  for (int32_t c : cand) top = std::max(top, double(logits[c]));
  std::vector<double> w(cand.size());
  double sum = 0;
  for (size_t i = 0; i < cand.size(); ++i) sum += w[i] = std::exp((double(logits[cand[i]]) - top) * inv_t);
  // min_p: drop tokens whose probability is below min_p times the most likely one's.
  size_t cut = cand.size();
  if (p.min_p > 0)
    for (size_t i = 1; i < cand.size(); ++i)
      if (w[i] < p.min_p * w[0]) {
        cut = i;
        break;
      }
  // top_p: the smallest prefix whose mass reaches top_p (always at least one token).
  if (p.top_p < 1) {
    double acc = 0;
    for (size_t i = 0; i < cut; ++i) {
      acc += w[i] / sum;
      if (acc >= p.top_p) {
        cut = i + 1;
        break;
      }
    }
  }
  double mass = 0;
  for (size_t i = 0; i < cut; ++i) mass += w[i];
  // One uniform draw from the seeded generator, mapped onto the kept mass.
  const double u = std::generate_canonical<double, 64>(rng) * mass;
  double acc = 0;
  size_t pick = cut - 1;
  for (size_t i = 0; i < cut; ++i) {
    acc += w[i];
    if (u < acc) {
      pick = i;
      break;
    }
  }
  return pick;
}

}  // namespace

Sample Sampler::sample(const float* logits, int64_t n, const std::function<bool(int32_t)>& allowed) {
  if (n <= 0) fail("sampling from an empty distribution");
  // Log-softmax of the raw logits, for reporting.
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, double(logits[i]));
  double z = 0;
  for (int64_t i = 0; i < n; ++i) z += std::exp(double(logits[i]) - mx);
  const double log_z = mx + std::log(z);
  auto logprob = [&](int32_t t) { return double(logits[t]) - log_z; };

  // Candidates: every allowed token, most likely first (ties: lower id first).
  std::vector<int32_t> cand;
  cand.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i)
    if (!allowed || allowed(int32_t(i))) cand.push_back(int32_t(i));
  if (cand.empty()) fail("no token is allowed at this point");
  auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };

  Sample s;
  const size_t want_top = std::min(size_t(p_.top_logprobs), size_t(n));
  if (want_top > 0) {
    std::vector<int32_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    std::partial_sort(all.begin(), all.begin() + std::ptrdiff_t(want_top), all.end(), better);
    for (size_t i = 0; i < want_top; ++i) s.top.push_back({all[i], logprob(all[i])});
  }

  if (p_.temperature == 0) {
    s.token = *std::min_element(cand.begin(), cand.end(), better);
    s.logprob = logprob(s.token);
    return s;
  }

  // Keep at most top_k candidates, sorted by probability.
  // (Without any filter the order does not matter and the sort is skipped.)
  const bool filtered = p_.top_k > 0 || p_.top_p < 1 || p_.min_p > 0;
  if (filtered) {
    size_t keep = cand.size();
    if (p_.top_k > 0) keep = std::min(keep, size_t(p_.top_k));
    std::partial_sort(cand.begin(), cand.begin() + std::ptrdiff_t(keep), cand.end(), better);
    cand.resize(keep);
  }

  s.token = cand[draw_tempered(logits, cand, p_, rng_)];
  s.logprob = logprob(s.token);
  return s;
}

}  // namespace sluice
