// Device placement without a GPU: --device parsing and its errors, the VRAM
// expert cache's size rule, and the slot bookkeeping behind that cache.
#include <gtest/gtest.h>

#include "compute/devices.h"
#include "engine/memory_plan.h"
#include "experts/expert_slots.h"
#include "util/error.h"

namespace sluice::device_placement_test {
namespace {

std::string error_of(const std::string& device) {
  try {
    parse_device(device);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceOption, ParsesCpuCudaAndAuto) {
  EXPECT_EQ(parse_device("cpu").name(), "cpu");
  EXPECT_NE(error_of("gpu").find("--device must be cpu, cuda, cuda:N or auto"), std::string::npos);
  EXPECT_NE(error_of("cuda:x").find("expected cuda:N"), std::string::npos);
  const CudaReport r = cuda_report();
  if (r.devices.empty()) {
    // No GPU here: auto is the CPU, and asking for CUDA says why it cannot be had.
    EXPECT_EQ(parse_device("auto").name(), "cpu");
    const std::string e = error_of("cuda");
    EXPECT_NE(e.find(r.compiled ? "no usable GPU" : "no CUDA backend"), std::string::npos) << e;
  } else {
    EXPECT_EQ(parse_device("auto").name(), "cuda:0");
    EXPECT_EQ(parse_device("cuda:0").name(), "cuda:0");
    EXPECT_NE(error_of("cuda:99").find("no such GPU"), std::string::npos);
  }
}

TEST(VramPlan, ExpertCacheIsWhatSpineStateAndReserveLeaveInWholeExperts) {
  const uint64_t G = kGiB, M = 1ull << 20;
  // --vram 24 with a 6 GiB spine, 1 GiB of state: reserve 2.4 GiB, cache the rest in 100 MiB experts.
  uint64_t c = plan_vram_expert_cache(24 * G, 100 * G, 6 * G, 1 * G, 100 * M);
  const uint64_t left = 24 * G - 6 * G - 1 * G - 24 * G / 10;
  EXPECT_EQ(c, left / (100 * M) * (100 * M));
  // Without --vram: free memory (after the spine) is the limit; the reserve is capped at 4 GiB.
  c = plan_vram_expert_cache(0, 130 * G, 10 * G, 2 * G, 64 * M);
  EXPECT_EQ(c, (130 * G - 2 * G - 4 * G) / (64 * M) * (64 * M));
  // A budget larger than the device has is held to what is free.
  c = plan_vram_expert_cache(200 * G, 20 * G, 10 * G, 0, 1 * M);
  EXPECT_EQ(c, (20 * G - 4 * G) / M * M);
  // Nothing left, or not one expert: no cache.
  EXPECT_EQ(plan_vram_expert_cache(8 * G, 100 * G, 15 * G / 2, 0, 1 * M), 0u);
  EXPECT_EQ(plan_vram_expert_cache(24 * G, 100 * G, 6 * G, 0, 0), 0u);
  EXPECT_EQ(plan_vram_expert_cache(2 * G, 100 * G, 0, 0, 3 * G), 0u);
}

TEST(ExpertSlots, FindsClaimsAndReusesTheLeastRecentlyUsed) {
  ExpertSlots s(3);
  EXPECT_EQ(s.find(0, 1), -1);
  const int64_t a = s.claim(0, 1).slot, b = s.claim(0, 2).slot, c = s.claim(1, 1).slot;
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_NE(a, c);
  EXPECT_EQ(s.used(), 3);
  EXPECT_EQ(s.find(0, 2), b);
  // Using (0, 1) makes (0, 2) the least recently used.
  s.pin(a);
  s.unpin(a);
  ExpertSlots::Claim d = s.claim(2, 7);
  EXPECT_TRUE(d.evicted);
  EXPECT_EQ(d.slot, b);
  EXPECT_EQ(d.old_layer, 0);
  EXPECT_EQ(d.old_expert, 2);
  EXPECT_EQ(s.find(0, 2), -1);
  EXPECT_EQ(s.find(2, 7), b);
  EXPECT_THROW(s.claim(2, 7), Error);
}

TEST(ExpertSlots, PinnedSlotsAreNeverReused) {
  ExpertSlots s(2);
  const int64_t a = s.claim(0, 0).slot, b = s.claim(0, 1).slot;
  s.pin(a);
  s.pin(b);
  EXPECT_EQ(s.claim(0, 2).slot, -1);  // every slot in use: the caller goes without the cache
  s.pin(b);                           // pins nest
  s.unpin(b);
  EXPECT_EQ(s.claim(0, 2).slot, -1);
  s.unpin(b);
  ExpertSlots::Claim c = s.claim(0, 2);
  EXPECT_EQ(c.slot, b);
  EXPECT_EQ(s.find(0, 0), a);
  EXPECT_THROW(s.unpin(b), Error);  // the new expert was never pinned
  s.drop(a);
  EXPECT_EQ(s.find(0, 0), -1);
  EXPECT_EQ(s.used(), 1);
  EXPECT_EQ(s.claim(3, 3).slot, a);
}

TEST(ExpertSlots, NoSlotsMeansNoCache) {
  ExpertSlots s(0);
  EXPECT_EQ(s.claim(0, 0).slot, -1);
  EXPECT_EQ(s.used(), 0);
}

}  // namespace
}  // namespace sluice::device_placement_test
