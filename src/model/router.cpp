#include "model/router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/ops.h"

namespace sluice {

namespace {
// Indices of the k largest values; ties go to the lower index.
void top_k(const float* v, int64_t n, int64_t k, int32_t* out) {
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  std::copy(idx.begin(), idx.begin() + k, out);
}
}  // namespace

void route(const RouterSpec& s, const float* logits, int32_t* ids, float* weights) {
  const int64_t E = s.n_experts, K = s.top_k;
  std::vector<float> score(static_cast<size_t>(E));
  switch (s.scoring) {
    case RouterSpec::SigmoidBiased: {
      std::vector<float> choice(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) {
        score[size_t(e)] = ops::sigmoid(logits[e]);
        choice[size_t(e)] = score[size_t(e)] + (s.selection_bias ? s.selection_bias[e] : 0.0f);
      }
      if (s.n_group > 1) {
        const int64_t per = E / s.n_group;
        std::vector<float> gscore(size_t(s.n_group));
        for (int64_t g = 0; g < s.n_group; ++g) {
          int32_t two[2];
          top_k(choice.data() + g * per, per, std::min<int64_t>(2, per), two);
          gscore[size_t(g)] = choice[size_t(g * per + two[0])] + (per > 1 ? choice[size_t(g * per + two[1])] : 0.0f);
        }
        std::vector<int32_t> keep(size_t(s.topk_group));
        top_k(gscore.data(), s.n_group, s.topk_group, keep.data());
        std::vector<bool> kept(size_t(s.n_group), false);
        for (auto g : keep) kept[size_t(g)] = true;
        for (int64_t e = 0; e < E; ++e)
          if (!kept[size_t(e / per)]) choice[size_t(e)] = s.dropped_group_value;
      }
      top_k(choice.data(), E, K, ids);
      break;
    }
    case RouterSpec::SoftmaxAll: {
      std::copy(logits, logits + E, score.begin());
      ops::softmax(score.data(), E);
      top_k(score.data(), E, K, ids);
      break;
    }
    case RouterSpec::TopkSoftmax: {
      top_k(logits, E, K, ids);
      std::vector<float> sel(static_cast<size_t>(K));
      for (int64_t j = 0; j < K; ++j) sel[size_t(j)] = logits[ids[j]];
      ops::softmax(sel.data(), K);
      for (int64_t j = 0; j < K; ++j) weights[j] = sel[size_t(j)];
      return;
    }
  }
  double sum = 0.0;
  for (int64_t j = 0; j < K; ++j) {
    weights[j] = score[size_t(ids[j])];
    sum += weights[j];
  }
  if (s.renormalize) {
    const double denom = s.scoring == RouterSpec::SigmoidBiased ? sum + 1e-20 : sum;
    for (int64_t j = 0; j < K; ++j) weights[j] = float(weights[j] / denom);
  }
  for (int64_t j = 0; j < K; ++j) weights[j] *= s.scaling;
}

}  // namespace sluice
