// Expert parallelism: several processes (ranks, started by mpirun) run the
// same passes over the same tokens. The spine is computed on every rank; the
// routed experts of each layer are split between the ranks, each computing
// only the (token, expert) rows of the experts it owns. One collective per MoE
// layer (share_rows) then gives every rank every row, and each rank sums them
// exactly as one process does (compute/backend.h scatter_add, expert-id
// order), so the logits are bit-identical to a single-process run.
//
// This is the seam: model/ sees only this interface (math plus "these rows are
// mine, give me the others"); the MPI implementation lives in cluster/. One
// process has no exchange at all (null), and the MoE block goes its usual way.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace sluice {

class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t ranks() const = 0;
  // `rows` is [begin.back(), width] floats on the host, packed; rank r computed
  // rows [begin[r], begin[r+1]) (begin has ranks() + 1 entries, the same on
  // every rank). One collective: afterwards every rank holds every row. Every
  // rank calls it for every MoE layer of every pass, in the same order.
  virtual void share_rows(float* rows, int64_t width, std::span<const int64_t> begin) = 0;
  // The smallest of every rank's `value` (one collective, every rank calls it):
  // what must be the same on every rank although each host plans for itself.
  virtual int64_t agree_min(int64_t value) = 0;
  // Why the ranks can no longer compute together (a rank was lost), empty
  // while they can: every later exchange fails with it, and the server's
  // /health says it.
  virtual std::string lost() const { return {}; }
};

// The process's exchange: null (one process) unless the command line started
// one (cli/, under mpirun). Not owned; set before any model is opened.
ExpertExchange* expert_exchange();
void set_expert_exchange(ExpertExchange* exchange);

// Which rank computes each routed expert. Per layer, rank r owns the experts
// [first[r], first[r + 1]): contiguous runs in expert-id order, so a rank's
// rows in the MoE block's packed (expert-id ordered) outputs are contiguous
// too. Deterministic from the experts' sizes and the number of ranks.
struct ExpertShards {
  ExpertExchange* exchange = nullptr;       // null: this process computes every expert
  std::vector<std::vector<int32_t>> first;  // per layer: ranks + 1 boundaries (empty: no routed experts)

  bool sharded() const { return exchange != nullptr; }
  int32_t owner(int32_t layer, int32_t expert) const;
  bool owns(int32_t layer, int32_t expert) const { return !exchange || owner(layer, expert) == exchange->rank(); }
  // How many experts of `layer` this rank owns (0 when unsharded: the shards do not know the layer sizes then).
  int32_t owned_count(int32_t layer) const;
};

// Splits each layer's experts (bytes[layer][expert]: their stored sizes) into
// exchange.ranks() contiguous runs of about equal bytes: rank r's run ends at
// the first expert whose cumulative bytes reach (r + 1) / ranks of the layer's.
ExpertShards shard_experts(ExpertExchange& exchange, const std::vector<std::vector<uint64_t>>& bytes);

}  // namespace sluice
