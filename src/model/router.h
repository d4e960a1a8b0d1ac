// Top-k expert routing, in the variants the supported families use.
#pragma once
#include <cstdint>

namespace sluice {

struct RouterSpec {
  enum Scoring {
    SigmoidBiased,  // DeepSeek-V3 / Kimi: sigmoid scores; (score + selection_bias) picks, unbiased scores weigh
    SoftmaxAll,     // Qwen3-MoE: softmax over all experts, then top-k
    TopkSoftmax,    // gpt-oss: top-k of the logits, softmax over the k picked
  } scoring = SigmoidBiased;
  int64_t n_experts = 0, top_k = 0;
  int64_t n_group = 1, topk_group = 1;  // group-limited selection (SigmoidBiased)
  bool renormalize = true;
  float scaling = 1.0f;
  const float* selection_bias = nullptr;  // e_score_correction_bias [n_experts]
  // Value given to experts of dropped groups. transformers uses 0 (the golden
  // references follow it); DeepSeek's own code uses -inf. They differ only when
  // biased scores are negative.
  float dropped_group_value = 0.0f;
};

// logits: [n_experts] router outputs (bias already added). Writes top_k expert ids and weights.
void route(const RouterSpec& spec, const float* logits, int32_t* ids, float* weights);

}  // namespace sluice
