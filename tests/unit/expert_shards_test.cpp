// Expert parallelism's split of each layer's routed experts between ranks:
// contiguous runs in expert-id order, balanced by bytes, every expert owned by
// exactly one rank, the same on every rank.
#include <gtest/gtest.h>

#include "compute/expert_exchange.h"

namespace sluice::expert_shards_test {
namespace {

class FakeExchange : public ExpertExchange {
 public:
  FakeExchange(int32_t rank, int32_t ranks) : rank_(rank), ranks_(ranks) {}
  int32_t rank() const override { return rank_; }
  int32_t ranks() const override { return ranks_; }
  void share_rows(float*, int64_t, std::span<const int64_t>) override {}
  int64_t agree_min(int64_t v) override { return v; }

 private:
  int32_t rank_, ranks_;
};

TEST(ExpertShards, EqualExpertsSplitEvenly) {
  FakeExchange x(1, 3);
  const ExpertShards s = shard_experts(x, {{}, std::vector<uint64_t>(8, 100), std::vector<uint64_t>(16, 7)});
  EXPECT_TRUE(s.first[0].empty());  // a dense layer
  EXPECT_EQ(s.first[1], (std::vector<int32_t>{0, 3, 6, 8}));
  EXPECT_EQ(s.first[2], (std::vector<int32_t>{0, 6, 11, 16}));
  EXPECT_EQ(s.owned_count(1), 3);
  EXPECT_EQ(s.owned_count(2), 5);
  EXPECT_EQ(s.owner(1, 0), 0);
  EXPECT_EQ(s.owner(1, 3), 1);
  EXPECT_EQ(s.owner(1, 7), 2);
  EXPECT_TRUE(s.owns(1, 5));
  EXPECT_FALSE(s.owns(1, 6));
}

TEST(ExpertShards, BalancedByBytes) {
  FakeExchange x(0, 2);
  // 10 + 10 + 10 + 30 + 40: half the bytes (50) is reached at the fourth expert.
  const ExpertShards s = shard_experts(x, {{10, 10, 10, 30, 40}});
  EXPECT_EQ(s.first[0], (std::vector<int32_t>{0, 4, 5}));
}

TEST(ExpertShards, EveryExpertHasOneOwnerWhateverTheRanks) {
  for (int32_t ranks = 1; ranks <= 7; ++ranks) {
    std::vector<std::vector<uint64_t>> bytes = {{5}, {1, 2, 3}, std::vector<uint64_t>(10, 4), {9, 1, 1, 1, 1, 1, 9}};
    std::vector<int32_t> owned(bytes.size(), 0);
    for (int32_t r = 0; r < ranks; ++r) {
      FakeExchange x(r, ranks);
      const ExpertShards s = shard_experts(x, bytes);
      for (size_t l = 0; l < bytes.size(); ++l) {
        ASSERT_EQ(s.first[l].size(), size_t(ranks) + 1);
        owned[l] += s.owned_count(int32_t(l));
        for (int32_t e = 0; e < int32_t(bytes[l].size()); ++e) {
          const int32_t o = s.owner(int32_t(l), e);
          EXPECT_GE(e, s.first[l][size_t(o)]);
          EXPECT_LT(e, s.first[l][size_t(o) + 1]);
        }
      }
    }
    for (size_t l = 0; l < bytes.size(); ++l) EXPECT_EQ(owned[l], int32_t(bytes[l].size())) << ranks << " ranks";
  }
}

TEST(ExpertShards, UnshardedOwnsEverything) {
  const ExpertShards s;
  EXPECT_FALSE(s.sharded());
  EXPECT_TRUE(s.owns(3, 17));
}

}  // namespace
}  // namespace sluice::expert_shards_test
