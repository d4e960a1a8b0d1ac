#include "experts/cuda/vram_experts.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace sluice {

uint64_t VramExperts::placed_bytes(const ExpertWeights& w) {
  uint64_t n = CudaBackend::placed_bytes(w.gate.q) + CudaBackend::placed_bytes(w.down.q);
  if (!w.up.empty()) n += CudaBackend::placed_bytes(w.up.q);
  return n;
}

namespace {
int64_t slot_count(const ExpertTable& shapes, uint64_t bytes, uint64_t* slot_bytes) {
  uint64_t largest = 0;
  for (int32_t l = 0; l < shapes.layers(); ++l)
    for (int32_t e = 0; e < shapes.experts(l); ++e) largest = std::max(largest, VramExperts::placed_bytes(shapes.at(l, e)));
  *slot_bytes = largest;
  return largest ? int64_t(bytes / largest) : 0;
}
}  // namespace

VramExperts::VramExperts(CudaBackend& be, ExpertSource& host, std::unique_ptr<ExpertSource> owned,
                         const ExpertTable& shapes, uint64_t bytes)
    : be_(be), host_(host), owned_(std::move(owned)), slots_(slot_count(shapes, bytes, &slot_bytes_)) {
  placed_.resize(size_t(slots_.slots()));
  if (slots_.slots() > 0) arena_ = be_.allocate_bytes(uint64_t(slots_.slots()) * slot_bytes_, "the VRAM expert cache");
  const HostArena h = host_.host_arena();
  if (h.ptr && h.bytes && be_.pin_host(h.ptr, h.bytes)) pinned_ = h.ptr;
}

VramExperts::~VramExperts() {
  if (pinned_) be_.unpin_host(pinned_);
  be_.free_bytes(arena_);
}

std::vector<int32_t> VramExperts::missing(int32_t layer, const int32_t* experts, int64_t n) const {
  std::vector<int32_t> m;
  for (int64_t i = 0; i < n; ++i)
    if (slots_.find(layer, experts[i]) < 0) m.push_back(experts[i]);
  return m;
}

void VramExperts::request(int32_t layer, const int32_t* experts, int64_t n) {
  auto m = missing(layer, experts, n);
  if (!m.empty()) host_.request(layer, m.data(), int64_t(m.size()));
}

void VramExperts::prefetch(int32_t layer, const int32_t* experts, int64_t n) {
  auto m = missing(layer, experts, n);
  if (!m.empty()) host_.prefetch(layer, m.data(), int64_t(m.size()));
}

bool VramExperts::ready(int32_t layer, int32_t expert) {
  return slots_.find(layer, expert) >= 0 || host_.ready(layer, expert);
}

const ExpertWeights& VramExperts::acquire(int32_t layer, int32_t expert) {
  int64_t s = slots_.find(layer, expert);
  if (s >= 0) {
    ++hits_;
    hit_bytes_ += expert_bytes(placed_[size_t(s)].host_view);
    slots_.pin(s);
    return placed_[size_t(s)].w;
  }
  const ExpertSlots::Claim c = frozen_ ? ExpertSlots::Claim{} : slots_.claim(layer, expert);
  if (c.slot < 0) {  // no cache, or every slot in use: the backend copies it in for the call
    ++passthrough_[{layer, expert}];
    const ExpertWeights& w = host_.acquire(layer, expert);
    copied_ += expert_bytes(w);  // crosses PCIe all the same (a long prefill's experts mostly go this way)
    return w;
  }
  s = c.slot;
  const ExpertWeights& hw = host_.acquire(layer, expert);
  const auto t0 = std::chrono::steady_clock::now();
  Placed& p = placed_[size_t(s)];
  try {
    uint8_t* at = arena_.data + uint64_t(s) * slot_bytes_;
    p.gate = be_.place_into(hw.gate.q, at);
    at += CudaBackend::placed_bytes(hw.gate.q);
    if (!hw.up.empty()) {
      p.up = be_.place_into(hw.up.q, at);
      at += CudaBackend::placed_bytes(hw.up.q);
    }
    p.down = be_.place_into(hw.down.q, at);
  } catch (...) {
    host_.release(layer, expert);
    slots_.drop(s);
    throw;
  }
  p.w = hw;
  p.host_view = hw;
  p.w.gate.device = &p.gate;
  p.w.up.device = hw.up.empty() ? nullptr : &p.up;
  p.w.down.device = &p.down;
  host_.release(layer, expert);
  copied_ += placed_bytes(hw);
  copy_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  slots_.pin(s);
  return p.w;
}

bool VramExperts::preload(const ExpertTable& shapes) {
  int64_t total = 0;
  for (int32_t l = 0; l < shapes.layers(); ++l) total += shapes.experts(l);
  if (total == 0 || total > slots_.slots()) return false;
  for (int32_t l = 0; l < shapes.layers(); ++l) {
    std::vector<int32_t> all(size_t(shapes.experts(l)));
    for (int32_t e = 0; e < shapes.experts(l); ++e) all[size_t(e)] = e;
    request(l, all.data(), int64_t(all.size()));
    for (int32_t e = 0; e < shapes.experts(l); ++e) {
      acquire(l, e);
      release(l, e);
    }
  }
  hits_ = hit_bytes_ = 0;
  return true;
}

int64_t VramExperts::preload_fixed(const ExpertTable& shapes) {
  if (!preload(shapes)) {  // not all fit: every layer's experts in turn, lowest ids first
    int32_t most = 0;
    for (int32_t l = 0; l < shapes.layers(); ++l) most = std::max(most, shapes.experts(l));
    for (int32_t e = 0; e < most && slots_.used() < slots_.slots(); ++e)
      for (int32_t l = 0; l < shapes.layers() && slots_.used() < slots_.slots(); ++l) {
        if (e >= shapes.experts(l)) continue;
        request(l, &e, 1);
        acquire(l, e);
        release(l, e);
      }
    hits_ = hit_bytes_ = 0;
  }
  frozen_ = true;
  return slots_.used();
}

void VramExperts::release(int32_t layer, int32_t expert) {
  auto it = passthrough_.find({layer, expert});
  if (it != passthrough_.end()) {
    if (--it->second == 0) passthrough_.erase(it);
    host_.release(layer, expert);
    return;
  }
  const int64_t s = slots_.find(layer, expert);
  if (s >= 0) slots_.unpin(s);
}

ExpertStats VramExperts::stats() const {
  ExpertStats st = host_.stats();
  st.device_hits = hits_;
  st.device_bytes_copied = copied_;
  st.device_copy_seconds = copy_seconds_;
  // acquire() calls: the host source saw only the misses.
  st.requests += hits_;
  st.hits += hits_;
  st.bytes_needed += hit_bytes_;
  return st;
}

}  // namespace sluice
