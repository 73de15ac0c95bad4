// ZeRO-1 shards (train/zero.h): contiguous runs of whole tensors that cover the layout once, each
// tensor with the rank whose even share of the buffer holds its midpoint; a sub-layout of a
// shard addresses the same elements as the full layout.
#include "memo/train/zero.h"

#include <gtest/gtest.h>

#include "../memory/memory_test_util.h"
#include "memo/model/presets.h"
#include "test_util.h"

namespace memo {
namespace {

void expect_cover(const ParamLayout& layout, const std::vector<ZeroShard>& shards) {
  size_t t = 0;
  int64_t at = 0;
  for (const ZeroShard& s : shards) {
    EXPECT_EQ(s.first, t);
    EXPECT_EQ(s.begin, at);
    EXPECT_LE(s.first, s.last);
    t = s.last;
    at = s.end;
  }
  EXPECT_EQ(t, layout.params().size());
  EXPECT_EQ(at, layout.total_numel());
}

TEST(ZeroShards, cover_every_tensor_once_in_even_shares) {
  const ParamLayout layout(llama_preset("llama-7b"));
  for (int ranks : {1, 2, 3, 8, 64}) {
    SCOPED_TRACE(ranks);
    const std::vector<ZeroShard> shards = zero_shards(layout, ranks);
    ASSERT_EQ(shards.size(), size_t(ranks));
    expect_cover(layout, shards);
    // the largest tensor (the embedding) bounds how uneven whole tensors can be
    int64_t largest = 0;
    for (const ParamInfo& p : layout.params()) largest = std::max(largest, p.numel);
    const int64_t even = layout.total_numel() / ranks;
    for (const ZeroShard& s : shards) EXPECT_LE(std::abs((s.end - s.begin) - even), largest);
    // by the midpoint rule a shard ends within half a tensor of its even share's end: the
    // tensor across that end goes to the side that holds its midpoint
    for (int r = 0; r + 1 < ranks; ++r) {
      const int64_t target = layout.total_numel() * (r + 1) / ranks;
      EXPECT_LE(std::abs(shards[size_t(r)].end - target), largest / 2 + 1) << "rank " << r;
    }
  }
}

TEST(ZeroShards, more_ranks_than_tensors_leave_some_empty) {
  ModelConfig c = testing::tiny_config();
  c.num_hidden_layers = 1;
  const ParamLayout layout(c);
  const int ranks = int(layout.params().size()) + 3;
  const std::vector<ZeroShard> shards = zero_shards(layout, ranks);
  expect_cover(layout, shards);
  int empty = 0;
  for (const ZeroShard& s : shards) empty += s.first == s.last;
  EXPECT_GE(empty, 3);
}

TEST(ZeroShards, a_shard_layout_addresses_the_same_elements) {
  const ParamLayout layout(testing::tiny_config());
  const std::vector<ZeroShard> shards = zero_shards(layout, 3);
  for (const ZeroShard& s : shards) {
    const ParamLayout sub(layout, s.first, s.last);
    EXPECT_EQ(sub.base_offset(), s.begin);
    EXPECT_EQ(sub.total_numel(), s.end - s.begin);
    for (size_t i = 0; i < sub.params().size(); ++i) {
      EXPECT_EQ(sub.params()[i].name, layout.params()[s.first + i].name);
      EXPECT_EQ(sub.params()[i].offset + s.begin, layout.params()[s.first + i].offset);
    }
  }
}

}  // namespace
}  // namespace memo
