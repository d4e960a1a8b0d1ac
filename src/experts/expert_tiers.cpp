#include "experts/expert_tiers.h"

#include "experts/remote_experts.h"
#include "experts/vram_tier.h"

namespace sluice {

ExpertTiers make_expert_source(const ExpertSourcePlan& plan, const ExpertSourceModel& model) {
  ExpertTiers tiers;
  // A stream-mode directory's routed experts are fetched into the local sparse
  // shards on first use, so they must be streamed (never read through the
  // resident table, whose holes read as zeros).
  if (plan.stream || plan.remote) {
    StreamingOptions so = plan.streaming;
    const bool from_manifest = so.checksums.empty() && plan.manifest_checksums;
    const Manifest* manifest = (from_manifest || plan.remote) ? model.checkpoint.manifest() : nullptr;
    if (from_manifest && manifest) so.checksums = manifest->checksum_table();
    if (plan.remote && !so.fetcher)
      so.fetcher = make_remote_fetcher(model.dir, model.checkpoint, model.index,
                                       manifest ? manifest->checksum_table() : std::vector<std::vector<uint64_t>>{});
    auto streaming = std::make_unique<StreamingExperts>(model.table, model.checkpoint, std::move(so));
    tiers.streaming = streaming.get();
    tiers.source = std::move(streaming);
  }
  if (plan.vram_bytes > 0) {
    ExpertSource& host = tiers.source ? *tiers.source : model.table;
    tiers.source = make_vram_experts(model.backend, host, std::move(tiers.source), model.table, plan.vram_bytes,
                                     plan.vram_fixed, nullptr);
  }
  return tiers;
}

}  // namespace sluice
