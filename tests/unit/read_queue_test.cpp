// The read queue's submission never waits for a full io_uring ring (a caller
// with one queue per drive must be able to queue reads for every drive while
// one drive's ring is full), and every read queued beyond the depth completes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <string>

#include "io/read_queue.h"

namespace sluice::read_queue_test {
namespace {

TEST(ReadQueue, SubmitDoesNotWaitForAFullRing) {
  // Reads from an empty pipe stay in flight until bytes are written to it.
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  auto q = ReadQueue::create(ReadQueue::Kind::IoUring, 4);
  ASSERT_EQ(q->name(), "io_uring");
  constexpr int kReads = 12;  // three times the ring's depth
  uint8_t buf[kReads] = {};
  // One thread submits and reaps (io_uring cancels a thread's reads when it exits).
  std::promise<void> submitted;
  auto reader = std::async(std::launch::async, [&] {
    for (int i = 0; i < kReads; ++i) q->submit({p[0], 0, 1, buf + i, uint64_t(i)});
    q->flush();
    submitted.set_value();
    std::vector<ReadCompletion> done;
    while (q->in_flight() > 0) q->reap(done, true);
    return done;
  });
  const bool returned = submitted.get_future().wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  const std::string bytes = "abcdefghijkl";
  ASSERT_EQ(write(p[1], bytes.data(), kReads), kReads);  // lets a waiting submit go on either way
  const std::vector<ReadCompletion> done = reader.get();
  EXPECT_TRUE(returned) << "submit waited for a completion while the ring was full";
  ASSERT_EQ(done.size(), size_t(kReads));
  std::string got;
  for (const ReadCompletion& c : done) {
    EXPECT_EQ(c.result, 1) << "read " << c.tag;
    got += char(buf[c.tag]);
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, bytes);
  close(p[0]);
  close(p[1]);
}

}  // namespace
}  // namespace sluice::read_queue_test
