#include "compute/host_expert_timing.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "compute/backend.h"
#include "util/cache_size.h"
#include "util/error.h"

namespace sluice {

ExpertCopies::ExpertCopies(const ExpertWeights& w, int64_t n) {
  // Each range starts on a cache line, as the kernels' loads prefer.
  auto aligned = [](uint64_t b) { return (b + 63) / 64 * 64; };
  uint64_t total = 64;
  for (const ByteRange& r : expert_byte_ranges(w)) total += aligned(r.len);
  for (int64_t c = 0; c < n; ++c) {
    uint8_t* buf = bytes_.emplace_back(new uint8_t[total]).get();  // not zeroed: every byte used is copied
    uint8_t* at = buf + (64 - reinterpret_cast<uintptr_t>(buf) % 64) % 64;
    ExpertWeights copy = w;
    for (auto [dst, src] : {std::pair<QMatrix*, const QMatrix*>{&copy.gate.q, &w.gate.q}, {&copy.up.q, &w.up.q},
                            {&copy.down.q, &w.down.q}}) {
      const std::vector<ByteRange> ranges = weight_byte_ranges(*src);
      // A view points into its range (scales are addressed from row 0): keep its offset there.
      auto place = [&](const void* view, const ByteRange& r) {
        std::memcpy(at, r.ptr, r.len);
        const uint8_t* moved = at + (static_cast<const uint8_t*>(view) - r.ptr);
        at += aligned(r.len);
        return moved;
      };
      if (ranges.empty()) continue;
      dst->data = place(src->data, ranges[0]);
      if (ranges.size() > 1) dst->scale = place(src->scale, ranges[1]);
    }
    // Device copies are the source's: the host computes from the host bytes.
    copy.gate.device = copy.up.device = copy.down.device = nullptr;
    experts_.push_back(copy);
  }
}

int64_t copies_beyond_cache(uint64_t bytes) {
  const uint64_t llc = std::max<uint64_t>(last_level_cache_bytes(), 1);
  return std::max<int64_t>(2, int64_t((2 * llc + bytes - 1) / std::max<uint64_t>(bytes, 1)));
}

std::vector<std::pair<int64_t, double>> time_expert_rows(Backend& be, std::span<const ExpertWeights> experts,
                                                         std::span<const int64_t> rows, int reps,
                                                         const GatedActivation& act) {
  if (experts.empty() || rows.empty()) fail("internal: time_expert_rows needs experts and row counts");
  const int64_t in = experts[0].gate.cols(), out = experts[0].down.rows();
  const int64_t most = *std::max_element(rows.begin(), rows.end());
  std::vector<float> xs(size_t(most * in)), ys(size_t(most * out));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : xs) v = normal(rng);
  size_t next = 0;
  auto call = [&](int64_t n) {
    const ExpertWeights& w = experts[next++ % experts.size()];
    const auto t0 = std::chrono::steady_clock::now();
    be.expert_ffn(w, act, Tensor(xs.data(), n, in, in), Tensor(ys.data(), n, out, out));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<std::pair<int64_t, double>> seconds;
  for (const int64_t n : rows) {
    call(n);  // warm-up (first-use tables, the kernels' scratch)
    double best = 1e300;
    for (int i = 0; i < reps; ++i) best = std::min(best, call(n));
    seconds.push_back({n, best});
  }
  return seconds;
}

}  // namespace sluice
