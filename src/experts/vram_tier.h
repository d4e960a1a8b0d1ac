// The VRAM tier of the routed experts behind an interface free of CUDA: the
// VRAM expert cache (experts/cuda/vram_experts.h) exists only in a build with
// the CUDA backend, and only vram_tier.cpp sees it. On the CPU (and in a
// build without CUDA) there is no VRAM tier.
#pragma once
#include <cstdint>
#include <memory>

#include "compute/backend.h"
#include "compute/expert_source.h"

namespace sluice {

// The VRAM expert cache of `bytes` in front of `host` (kept alive when `owned`
// holds it); null on the CPU. When every expert fits they are all copied in at
// once. With `fixed` (experts computed on the host beside it, compute/host_experts.h)
// a fixed set fills it and stays (VramExperts::preload_fixed); else it is a least
// recently used cache. `slot_bytes` receives one expert's device size.
std::unique_ptr<ExpertSource> make_vram_experts(Backend& be, ExpertSource& host, std::unique_ptr<ExpertSource> owned,
                                                const ExpertTable& shapes, uint64_t bytes, bool fixed,
                                                uint64_t* slot_bytes);
// One expert's size in device memory (0 on the CPU).
uint64_t device_expert_bytes(Backend& be, const ExpertTable& shapes);

}  // namespace sluice
