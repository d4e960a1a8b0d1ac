// Mixture-of-experts feed-forward block: router, routed experts (optionally in
// a latent width, as Kimi K3), shared experts. For a batch of T tokens each
// selected expert is fetched and evaluated once over all the tokens that
// picked it. Reads are requested as soon as routing is known; the shared
// expert and already-resident experts are computed while the rest arrive.
// Expert outputs are summed in a fixed order, so results do not depend on
// which experts happened to be cached. Only those outputs live for the whole
// layer (top_k rows per token); each expert's gathered input and scratch live
// for its call on a backend that goes expert by expert (the CPU), for the group
// on one that runs groups at once (CUDA): activation_floats_per_token, which
// sets the prefill chunk, counts what the backend holds. Over a long prefill's
// span (forward_span) the packed rows go in batches of a chunk's size, each
// batch's outputs added into the sum in id order before the next: every chosen
// expert is read once for the whole span while the scratch stays a chunk's.
// Expert parallelism (compute/expert_exchange.h): under mpirun each rank
// requests and computes only the chosen experts it owns (a contiguous run of
// the packed outputs), one exchange per layer fills in the others' rows, and
// the weighted sum is the same call on the same rows: bit-identical logits.
#pragma once
#include <memory>
#include <vector>

#include "compute/backend.h"
#include "compute/expert_source.h"
#include "model/blocks.h"
#include "model/mlp.h"
#include "model/router.h"

namespace sluice {

struct LatentProjection {  // Kimi K3 latent MoE: experts run on down(x), result normalised then up-projected
  Matrix down, up;
  Vector norm;  // RMSNorm weight over the latent width, or empty
  float eps = 1e-5f;
};

class MoeBlock : public FfnBlock {
 public:
  // router_bias: host values added to the router logits (gpt-oss), or null.
  MoeBlock(Backend& be, int32_t layer, std::shared_ptr<ExpertSourceSlot> experts, Matrix router,
           const float* router_bias, RouterSpec spec, GatedActivation act, std::unique_ptr<GatedMlp> shared,
           std::unique_ptr<LatentProjection> latent)
      : be_(be), layer_(layer), experts_(std::move(experts)), router_(router), router_bias_(router_bias), spec_(spec),
        act_(act), shared_(std::move(shared)), latent_(std::move(latent)) {}
  void forward(Tensor x, Tensor out) const override;
  void forward_span(Tensor x, Tensor out, int64_t batch_rows) const override;
  void prefetch_hint(Tensor x, int64_t batch_rows = 0) const override;
  int64_t activation_floats_per_token(int64_t routed_width) const override;
  int64_t span_floats_per_token() const override;

  // Routing only: top-k ids and weights (host data) for each row of x ([T, top_k] each), the
  // router's logits made for at most batch_rows rows at a time (0: all at once).
  void route_tokens(Tensor x, std::vector<int32_t>& ids, std::vector<float>& weights, int64_t batch_rows = 0) const;
  // The benchmark-only override's ids in place of the router's (checked); false: it gave none (hint only).
  bool override_routes(int64_t T, std::vector<int32_t>& ids, bool hint) const;

 private:
  Backend& be_;
  int32_t layer_;
  std::shared_ptr<ExpertSourceSlot> experts_;
  Matrix router_;
  const float* router_bias_;
  RouterSpec spec_;
  GatedActivation act_;
  std::unique_ptr<GatedMlp> shared_;
  std::unique_ptr<LatentProjection> latent_;

  // One pass's routes grouped by expert (model/moe.cpp group_by_expert).
  struct Pass {
    std::vector<int32_t> chosen;             // the distinct experts, ascending id
    std::vector<std::vector<int64_t>> rows;  // per expert id: the tokens that picked it
    std::vector<int64_t> offsets{0};         // chosen[i] owns packed rows [offsets[i], offsets[i+1])
    std::vector<int64_t> packed_rows;        // each packed row's token
    std::vector<float> packed_weights;       // and its router weight
    size_t mine_begin = 0, mine_end = 0;     // chosen[mine_begin, mine_end): this rank computes them
    int64_t rows_of(size_t i) const { return offsets[i + 1] - offsets[i]; }
  };
  Pass group_by_expert(const std::vector<int32_t>& ids, const std::vector<float>& wts, int64_t T) const;
  Pass slice(const Pass& p, int64_t n0, int64_t n1) const;
  // forward() with the chosen experts' packed rows in batches of batch_rows x top_k (0: one batch).
  void forward_rows(Tensor x, Tensor out, int64_t batch_rows) const;
  void compute_experts(const Pass& p, Tensor xin, Tensor acc) const;
  void run_on_device(const Pass& p, std::vector<bool> done, Tensor xin, Tensor Y) const;
  void compute_on_host(const Pass& p, const std::vector<size_t>& on_host, std::vector<float>& host_x,
                       std::vector<float>& host_y, int64_t W) const;
  void share_outputs(const std::vector<int32_t>& chosen, const std::vector<int64_t>& offsets, Tensor Y) const;
};

}  // namespace sluice
