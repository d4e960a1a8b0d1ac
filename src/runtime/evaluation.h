// Scoring a model on text it is given: perplexity (mean negative log-likelihood
// of each next token), and, against a reference model on the same tokens, the
// mean KL divergence KL(reference || model) and the share of positions where
// both put the same token first. Used to report what a cheaper form of a model
// (an int8 spine, another backend) costs in fidelity, in numbers users can
// compare. Log-probabilities are computed in double from the float logits.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/model.h"

namespace sluice {

struct EvalReport {
  int64_t documents = 0;
  int64_t predictions = 0;  // positions scored (every token but each document's first)
  double nll_sum = 0;       // natural log
  double perplexity() const;
  // Against a reference (compared == true):
  bool compared = false;
  double ref_nll_sum = 0;
  double kl_sum = 0, kl_max = 0;  // KL(reference || model) per position, in nats
  int64_t top1_agree = 0;
  double ref_perplexity() const;
  double mean_kl() const { return predictions ? kl_sum / double(predictions) : 0; }
  double top1_agreement() const { return predictions ? double(top1_agree) / double(predictions) : 0; }
};

// Scores each document from its start, `chunk` tokens per forward pass (0: the
// session's default); a document longer than the model's context is refused.
// reference: another model with the same vocabulary, or null. progress(done, total)
// is called after each chunk, in tokens.
EvalReport evaluate(const Model& model, const Model* reference, const std::vector<std::vector<int32_t>>& documents,
                    int64_t chunk = 0, const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace sluice
