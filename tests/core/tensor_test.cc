#include "memo/core/tensor.h"

#include <gtest/gtest.h>

#include "memo/backend/caching_allocator.h"

namespace memo {

TEST(View, slice_rows_is_one_contiguous_range) {
  float buf[12];
  View<float> t(buf, {4, 3});
  View<float> s = t.slice_rows(1, 3);
  EXPECT_EQ(s.data(), buf + 3);
  EXPECT_EQ(s.rows(), 2);
  EXPECT_TRUE(s.contiguous());
}

TEST(View, slice_cols_keeps_row_stride) {
  float buf[12];
  View<float> t(buf, {4, 3});
  View<float> s = t.slice_cols(1, 3);
  EXPECT_EQ(&s(2, 0), buf + 7);
  EXPECT_FALSE(s.contiguous());
}

TEST(CachingAllocator, reuses_released_blocks_without_new_reservation) {
  CachingAllocator alloc;
  View<float> a = alloc.acquire("a", {100, 10}, ActKind::kTransient, DType::kF32);
  alloc.release(a);
  int64_t reserved = alloc.reserved_bytes();
  View<float> b = alloc.acquire("b", {100, 10}, ActKind::kTransient, DType::kF32);
  EXPECT_EQ(alloc.reserved_bytes(), reserved);
  EXPECT_EQ(b.data(), a.data());
  alloc.release(b);
  EXPECT_EQ(alloc.live_bytes(), 0);
}

TEST(CachingAllocator, budget_exceeded_throws_budget_error) {
  CachingAllocator alloc(1024);
  EXPECT_THROW(alloc.acquire("big", {1024}, ActKind::kTransient, DType::kF32), BudgetError);
}

}  // namespace memo
