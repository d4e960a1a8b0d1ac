// The one place the routed-expert tiers are put together: from the tiers a
// memory plan chose, the expert source the MoE blocks read through. The host
// tier is the mapped checkpoint (the resident table), or the streaming
// reader's RAM cache over the local drives (experts/streaming_experts.h),
// which in a stream-mode directory first fetches missing experts from the
// remote repository into the on-disk cache (experts/remote_experts.h). On a
// GPU the VRAM expert cache goes in front of it (experts/vram_tier.h). The
// sizes are the plan's (engine/memory_plan.h); nothing is decided here.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "compute/backend.h"
#include "compute/expert_source.h"
#include "experts/streaming_experts.h"
#include "format/checkpoint.h"
#include "format/expert_index.h"

namespace sluice {

// Which tiers hold the routed experts, and their sizes.
struct ExpertSourcePlan {
  bool stream = false;  // read experts on demand into a RAM cache (else the mapped table serves them)
  StreamingOptions streaming;
  // Streamed experts are checked against the prepared manifest's checksums
  // when `streaming` brings none.
  bool manifest_checksums = false;
  // A stream-mode directory (`sluice pull --stream`): its experts are always
  // streamed, those missing locally fetched from its repository first.
  bool remote = false;
  uint64_t vram_bytes = 0;  // the VRAM expert cache in front (0: none)
  bool vram_fixed = false;  // a fixed set in VRAM, the rest computed on the host (compute/host_experts.h)
};

// The model the tiers serve; every part outlives the source.
struct ExpertSourceModel {
  const std::string& dir;
  const Checkpoint& checkpoint;
  const ExpertIndex& index;
  ExpertTable& table;  // the mapped experts, and every expert's shapes
  Backend& backend;
};

struct ExpertTiers {
  std::unique_ptr<ExpertSource> source;         // null: the MoE blocks read the table itself
  StreamingExperts* streaming = nullptr;  // the RAM tier when streamed (owned by `source`)
};

ExpertTiers make_expert_source(const ExpertSourcePlan& plan, const ExpertSourceModel& model);

}  // namespace sluice
