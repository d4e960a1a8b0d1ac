#include "runtime/evaluation.h"

#include <algorithm>
#include <cmath>

#include "runtime/session.h"
#include "util/error.h"

namespace sluice {

namespace {

// log-softmax of one row, in double.
void log_softmax(const float* x, int64_t n, std::vector<double>& out) {
  out.resize(size_t(n));
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, double(x[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - mx);
  const double lse = mx + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(x[i]) - lse;
}

int64_t argmax_row(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

}  // namespace

double EvalReport::perplexity() const { return predictions ? std::exp(nll_sum / double(predictions)) : 0; }
double EvalReport::ref_perplexity() const { return predictions ? std::exp(ref_nll_sum / double(predictions)) : 0; }

EvalReport evaluate(const Model& model, const Model* reference, const std::vector<std::vector<int32_t>>& documents,
                    int64_t chunk, const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t V = model.info().vocab;
  if (reference && reference->info().vocab != V)
    fail("the reference model's vocabulary ({}) differs from the model's ({})", reference->info().vocab, V);
  const int64_t ctx = model.info().max_positions;
  int64_t total = 0;
  for (size_t d = 0; d < documents.size(); ++d) {
    const auto& doc = documents[d];
    for (int32_t id : doc)
      if (id < 0 || id >= V) fail("document {}: token {} is outside the vocabulary ({})", d + 1, id, V);
    if (ctx > 0 && int64_t(doc.size()) > ctx)
      fail("document {} has {} tokens, more than the model's context of {} positions", d + 1, doc.size(), ctx);
    total += int64_t(doc.size());
  }
  const int64_t step = chunk > 0 ? chunk : 64;
  EvalReport r;
  r.compared = reference != nullptr;
  std::vector<double> lp, lq;
  int64_t done = 0;
  for (const auto& doc : documents) {
    if (doc.size() < 2) {
      done += int64_t(doc.size());
      continue;
    }
    ++r.documents;
    Session s(model);
    std::unique_ptr<Session> rs = reference ? std::make_unique<Session>(*reference) : nullptr;
    const int64_t T = int64_t(doc.size());
    for (int64_t b = 0; b < T - 1; b += step) {
      // Positions b..e-1 predict tokens b+1..e.
      const int64_t e = std::min(b + step, T - 1);
      const std::vector<int32_t> part(doc.begin() + b, doc.begin() + e);
      const std::vector<float> logits = s.feed_all(part);
      const std::vector<float> ref = rs ? rs->feed_all(part) : std::vector<float>();
      for (int64_t t = 0; t < e - b; ++t) {
        const int32_t next = doc[size_t(b + t + 1)];
        const float* row = logits.data() + t * V;
        log_softmax(row, V, lp);
        if (!std::isfinite(lp[size_t(next)]))
          fail("non-finite log-probability at position {} of document {}", b + t, r.documents);
        r.nll_sum -= lp[size_t(next)];
        ++r.predictions;
        if (!rs) continue;
        const float* rrow = ref.data() + t * V;
        log_softmax(rrow, V, lq);
        r.ref_nll_sum -= lq[size_t(next)];
        double kl = 0;
        for (int64_t i = 0; i < V; ++i) {
          const double q = std::exp(lq[size_t(i)]);
          if (q > 0) kl += q * (lq[size_t(i)] - lp[size_t(i)]);
        }
        kl = std::max(kl, 0.0);  // rounding can take an exact 0 below it
        r.kl_sum += kl;
        r.kl_max = std::max(r.kl_max, kl);
        r.top1_agree += argmax_row(row, V) == argmax_row(rrow, V);
      }
      done += e - b;
      if (progress) progress(done, total);
    }
    done += 1;  // the last token is never fed: nothing follows it
  }
  return r;
}

}  // namespace sluice
