// The memory available without --ram: MemAvailable and the cgroup limits
// (v1 and v2, the process's own cgroup and its ancestors) read from fake
// /proc and /sys trees, and the plan made from it: a model that fits is
// mapped, a larger one streamed within what is left after the margin.
// (tests/system/memory_cgroup.sh runs the real binary in a real cgroup.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/memory_plan.h"
#include "support/test_support.h"
#include "util/available_memory.h"
#include "util/error.h"

namespace sluice::available_memory_test {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t MiB = 1ull << 20;

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

// A fake root: meminfo with MemAvailable, and the mountinfo lines given.
void fake_proc(const test::TempDir& t, uint64_t mem_available_kb, const std::string& cgroup,
               const std::string& mountinfo) {
  write(t.file("proc/meminfo"), "MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:   " +
                                    std::to_string(mem_available_kb) + " kB\nBuffers:           1000 kB\n");
  write(t.file("proc/self/cgroup"), cgroup);
  write(t.file("proc/self/mountinfo"), mountinfo);
}

const std::string kV1Mounts =
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

void v1_cgroup(const test::TempDir& t, const std::string& rel, uint64_t limit, uint64_t usage, uint64_t inactive) {
  const std::string d = t.file("sys/fs/cgroup/memory" + rel);
  write(d + "/memory.limit_in_bytes", std::to_string(limit) + "\n");
  write(d + "/memory.usage_in_bytes", std::to_string(usage) + "\n");
  write(d + "/memory.stat", "cache 100\nrss 200\ntotal_cache 300\ntotal_inactive_file " + std::to_string(inactive) +
                                "\ntotal_active_file 5\n");
}

TEST(AvailableMemory, MemAvailableAloneWithoutACgroupLimit) {
  test::TempDir t;
  fake_proc(t, 20 * 1024 * 1024, "4:memory:/\n0::/\n", kV1Mounts);
  v1_cgroup(t, "", 9223372036854771712ull, 5 * MiB, 0);  // the root: no limit
  const AvailableMemory a = available_memory(t.path());
  EXPECT_EQ(a.mem_available, 20 * 1024 * MiB);
  EXPECT_EQ(a.bytes, 20 * 1024 * MiB);
  EXPECT_FALSE(a.cgroup_limited);
  EXPECT_EQ(a.describe(), "MemAvailable 20.00 GiB");
}

TEST(AvailableMemory, V1LimitLessWorkingSetBinds) {
  test::TempDir t;
  fake_proc(t, 20 * 1024 * 1024, "9:name=systemd:/\n4:memory:/jobs/one\n0::/\n", kV1Mounts);
  v1_cgroup(t, "", 9223372036854771712ull, 0, 0);
  v1_cgroup(t, "/jobs", 9223372036854771712ull, 0, 0);
  // 512 MiB limit, 200 MiB charged of which 50 MiB inactive page cache: 362 MiB left.
  v1_cgroup(t, "/jobs/one", 512 * MiB, 200 * MiB, 50 * MiB);
  const AvailableMemory a = available_memory(t.path());
  EXPECT_TRUE(a.cgroup_limited);
  EXPECT_EQ(a.cgroup, "/sys/fs/cgroup/memory/jobs/one");
  EXPECT_EQ(a.cgroup_limit, 512 * MiB);
  EXPECT_EQ(a.cgroup_used, 150 * MiB);
  EXPECT_EQ(a.bytes, 362 * MiB);
  EXPECT_EQ(a.describe(), "cgroup /sys/fs/cgroup/memory/jobs/one: limit 512.0 MiB, 150.0 MiB in use; "
                          "MemAvailable 20.00 GiB");
}

TEST(AvailableMemory, AnAncestorsTighterLimitBinds) {
  test::TempDir t;
  fake_proc(t, 20 * 1024 * 1024, "4:memory:/jobs/one\n", kV1Mounts);
  v1_cgroup(t, "", 9223372036854771712ull, 0, 0);
  v1_cgroup(t, "/jobs", 300 * MiB, 100 * MiB, 0);
  v1_cgroup(t, "/jobs/one", 1024 * MiB, 60 * MiB, 0);
  const AvailableMemory a = available_memory(t.path());
  EXPECT_EQ(a.bytes, 200 * MiB);
  EXPECT_EQ(a.cgroup, "/sys/fs/cgroup/memory/jobs");
}

TEST(AvailableMemory, MemAvailableBindsWhenLowerThanTheCgroup) {
  test::TempDir t;
  fake_proc(t, 100 * 1024, "4:memory:/one\n", kV1Mounts);
  v1_cgroup(t, "", 9223372036854771712ull, 0, 0);
  v1_cgroup(t, "/one", 4096 * MiB, 0, 0);
  const AvailableMemory a = available_memory(t.path());
  EXPECT_EQ(a.bytes, 100 * MiB);
  EXPECT_TRUE(a.cgroup_limited);
  EXPECT_EQ(a.describe().rfind("MemAvailable 100.0 MiB; cgroup", 0), 0u) << a.describe();
}

TEST(AvailableMemory, V2MaxAndHighUnderANamespacedMount) {
  test::TempDir t;
  // A container: the unified hierarchy mounted at its own cgroup (root /kubepods/pod1).
  fake_proc(t, 20 * 1024 * 1024, "0::/kubepods/pod1/app\n",
            "40 30 0:37 /kubepods/pod1 /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
  const std::string pod = t.file("sys/fs/cgroup"), app = pod + "/app";
  write(pod + "/memory.max", "1073741824\n");
  write(pod + "/memory.current", std::to_string(100 * MiB) + "\n");
  write(pod + "/memory.stat", "anon 1\nfile 2\ninactive_file 0\n");
  write(app + "/memory.max", "max\n");
  write(app + "/memory.high", std::to_string(600 * MiB) + "\n");
  write(app + "/memory.current", std::to_string(80 * MiB) + "\n");
  write(app + "/memory.stat", "anon 1\nactive_file 9\ninactive_file " + std::to_string(30 * MiB) + "\n");
  const AvailableMemory a = available_memory(t.path());
  EXPECT_EQ(a.cgroup_limit, 600 * MiB);  // memory.high throttles below memory.max
  EXPECT_EQ(a.cgroup_used, 50 * MiB);
  EXPECT_EQ(a.bytes, 550 * MiB);
  EXPECT_EQ(a.cgroup, "/sys/fs/cgroup/app");
}

TEST(AvailableMemory, NothingReadableIsZero) {
  test::TempDir t;
  const AvailableMemory a = available_memory(t.path());
  EXPECT_EQ(a.bytes, 0u);
  EXPECT_NE(a.describe().find("could be read"), std::string::npos);
}

ModelFootprint model(uint64_t spine, uint64_t experts) {
  ModelFootprint f;
  f.spine_bytes = spine;
  f.expert_bytes = experts;
  f.largest_expert_bytes = 4 * MiB;
  f.state_bytes_fixed = 8 * MiB;
  f.context_tokens = 4096;
  return f;
}

AvailableMemory available(uint64_t bytes) {
  AvailableMemory a;
  a.bytes = a.mem_available = bytes;
  return a;
}

TEST(AvailableMemory, MarginIsATenthBetween256MiBAnd2GiB) {
  EXPECT_EQ(available_margin(1024 * MiB), 256 * MiB);
  EXPECT_EQ(available_margin(10 * kGiB), kGiB);
  EXPECT_EQ(available_margin(100 * kGiB), 2 * kGiB);
}

TEST(AvailableMemory, AModelThatFitsIsMappedAsWithRam0) {
  const MemoryPlan p = plan_available(available(20 * kGiB), model(2 * kGiB, 6 * kGiB));
  EXPECT_EQ(p.source, BudgetSource::Available);
  EXPECT_EQ(p.budget, 0u);
  EXPECT_FALSE(p.stream_experts);
  EXPECT_EQ(p.margin, 2 * kGiB);
  EXPECT_EQ(p.mapped_needs, 8 * kGiB + 8 * MiB + 768 * MiB);  // weights, state, a mapped run's reserve
  EXPECT_EQ(p.reserve, 768 * MiB);
  EXPECT_NE(p.notice().find("fits in 18.00 GiB (20.00 GiB available: MemAvailable 20.00 GiB; less a 2.00 GiB "
                            "margin): weights mapped"),
            std::string::npos)
      << p.notice();
  EXPECT_NE(p.notice().find("--ram GIB"), std::string::npos) << p.notice();
  EXPECT_EQ(p.to_json()["budget_source"], "available");
}

// In a small container a small model still fits: the reserve shrinks with the budget.
TEST(AvailableMemory, ASmallBudgetShrinksTheMappedReserve) {
  const MemoryPlan p = plan_available(available(600 * MiB), model(20 * MiB, 30 * MiB));
  EXPECT_EQ(p.budget, 0u);
  EXPECT_EQ(p.margin, 256 * MiB);
  EXPECT_EQ(p.reserve, 344 * MiB / 5);  // a fifth of the 344 MiB budget
  EXPECT_EQ(p.mapped_needs, 58 * MiB + 344 * MiB / 5);
}

TEST(AvailableMemory, ALargerModelIsStreamedWithinWhatIsAvailable) {
  const MemoryPlan p = plan_available(available(20 * kGiB), model(2 * kGiB, 60 * kGiB));
  EXPECT_EQ(p.source, BudgetSource::Available);
  EXPECT_EQ(p.budget, 18 * kGiB);
  EXPECT_TRUE(p.stream_experts);
  EXPECT_FALSE(p.stream_spine);
  EXPECT_EQ(p.reserve + p.state + p.spine + p.expert_cache, p.budget);
  EXPECT_NE(p.notice().find("does not fit in 18.00 GiB (20.00 GiB available"), std::string::npos) << p.notice();
  EXPECT_NE(p.notice().find("routed experts streamed from disk within 18.00 GiB"), std::string::npos) << p.notice();
  EXPECT_NE(p.notice().find("--ram 0 maps every weight"), std::string::npos) << p.notice();
  EXPECT_NE(p.describe().find("memory plan for the 20.00 GiB available less a 2.00 GiB margin"), std::string::npos)
      << p.describe();
  // The same split --ram 18 makes.
  const MemoryPlan given = plan_memory(18 * kGiB, model(2 * kGiB, 60 * kGiB));
  EXPECT_EQ(given.expert_cache, p.expert_cache);
  EXPECT_EQ(given.notice(), "");
}

TEST(AvailableMemory, TooLittleMemorySaysWhatToDo) {
  const std::string small = test::error_of([] { plan_available(available(200 * MiB), model(kGiB, kGiB)); });
  EXPECT_NE(small.find("only 200.0 MiB of memory is available"), std::string::npos) << small;
  EXPECT_NE(small.find("--ram"), std::string::npos) << small;
  // Enough past the margin for a budget, not for the spine's streaming minimum.
  ModelFootprint f = model(8 * kGiB, 60 * kGiB);
  f.spine_stream_min_bytes = 2 * kGiB;
  const std::string tight = test::error_of([&] { plan_available(available(2 * kGiB), f); });
  EXPECT_NE(tight.find("the memory available (1.75 GiB) is too small"), std::string::npos) << tight;
  EXPECT_NE(tight.find("--ram 0 to map every weight"), std::string::npos) << tight;
}

TEST(AvailableMemory, UnknownMemoryMapsEverything) {
  const MemoryPlan p = plan_available(AvailableMemory{}, model(kGiB, 60 * kGiB));
  EXPECT_EQ(p.budget, 0u);
  EXPECT_NE(p.notice().find("could not be read"), std::string::npos) << p.notice();
}

}  // namespace
}  // namespace sluice::available_memory_test
