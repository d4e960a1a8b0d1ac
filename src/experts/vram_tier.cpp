#include "experts/vram_tier.h"

#ifdef SLUICE_HAVE_CUDA
#include "compute/cuda/cuda_backend.h"
#include "experts/cuda/vram_experts.h"
#endif
#include <algorithm>

namespace sluice {

uint64_t device_expert_bytes(Backend& be, const ExpertTable& shapes) {
  uint64_t largest = 0;
#ifdef SLUICE_HAVE_CUDA
  if (dynamic_cast<CudaBackend*>(&be))
    for (int32_t l = 0; l < shapes.layers(); ++l)
      for (int32_t e = 0; e < shapes.experts(l); ++e)
        largest = std::max(largest, VramExperts::placed_bytes(shapes.at(l, e)));
#endif
  (void)be;
  (void)shapes;
  return largest;
}

std::unique_ptr<ExpertSource> make_vram_experts(Backend& be, ExpertSource& host, std::unique_ptr<ExpertSource> owned,
                                                const ExpertTable& shapes, uint64_t bytes, bool fixed,
                                                uint64_t* slot_bytes) {
#ifdef SLUICE_HAVE_CUDA
  if (auto* c = dynamic_cast<CudaBackend*>(&be)) {
    auto v = std::make_unique<VramExperts>(*c, host, std::move(owned), shapes, bytes);
    if (slot_bytes) *slot_bytes = v->slot_bytes();
    if (fixed)
      v->preload_fixed(shapes);
    else
      v->preload(shapes);
    return v;
  }
#endif
  (void)be, (void)host, (void)owned, (void)shapes, (void)bytes, (void)fixed, (void)slot_bytes;
  return nullptr;
}

}  // namespace sluice
