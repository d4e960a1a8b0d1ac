// ThreadPool::parallel_for: every index exactly once, whatever the sizes, many
// jobs back to back, and pools used from several threads at once (the server's
// generation thread and the CLI share the global pool's pattern). Run under
// ThreadSanitizer in CI.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "util/thread_pool.h"

namespace sluice::thread_pool_test {
namespace {

void expect_each_index_once(ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(size_t(n > 0 ? n : 0));
  std::atomic<int64_t> calls{0};
  pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
    ASSERT_LE(0, b);
    ASSERT_LE(b, e);
    ASSERT_LE(e, n);
    ++calls;
    for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1, std::memory_order_relaxed);
  });
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(hits[size_t(i)].load(), 1) << "index " << i << " of " << n;
  }
  if (n > 0) {
    EXPECT_GE(calls.load(), 1);
  }
}

TEST(ThreadPool, EveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 7, 64, 1000, 4097})
      for (int64_t grain : {1, 3, 64, 5000}) expect_each_index_once(pool, n, grain);
  }
}

TEST(ThreadPool, ManyJobsBackToBack) {
  ThreadPool pool(4);
  int64_t total = 0;
  for (int j = 0; j < 2000; ++j) {
    std::atomic<int64_t> sum{0};
    pool.parallel_for(37, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
    ASSERT_EQ(sum.load(), 36 * 37 / 2);
    total += sum;
  }
  EXPECT_EQ(total, 2000 * 666);
}

// A parallel_for called from inside a job's share (attention split over heads calling a product
// that splits its rows) runs that inner loop on the calling thread: every inner index once, the
// outer job unharmed, no deadlock on the pool's single job slot.
TEST(ThreadPool, ANestedLoopRunsOnTheCallingThread) {
  ThreadPool pool(3);
  const int64_t outer = 9, inner = 50;
  std::vector<std::atomic<int>> hits(size_t(outer * inner));
  std::atomic<int> inline_calls{0}, inner_calls{0};
  pool.parallel_for(outer, 1, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const std::thread::id me = std::this_thread::get_id();
      bool same_thread = true;
      pool.parallel_for(inner, 1, [&](int64_t ib, int64_t ie) {
        ++inner_calls;
        if (std::this_thread::get_id() != me) same_thread = false;
        for (int64_t i = ib; i < ie; ++i) hits[size_t(o * inner + i)].fetch_add(1);
      });
      if (same_thread) ++inline_calls;
    }
  });
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;
  EXPECT_EQ(inline_calls.load(), outer);
  EXPECT_EQ(inner_calls.load(), outer);  // one call each: [0, inner) at once
  expect_each_index_once(pool, 1000, 1);  // the pool still works afterwards
}

// Separate pools driven from separate threads at the same time.
TEST(ThreadPool, PoolsOnSeveralThreads) {
  std::vector<std::thread> ts;
  std::atomic<int> failures{0};
  for (int t = 0; t < 3; ++t)
    ts.emplace_back([&failures] {
      ThreadPool pool(3);
      for (int j = 0; j < 300; ++j) {
        std::atomic<int64_t> n{0};
        pool.parallel_for(100, 7, [&](int64_t b, int64_t e) { n += e - b; });
        if (n != 100) ++failures;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace sluice::thread_pool_test
