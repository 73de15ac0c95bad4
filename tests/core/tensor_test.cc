#include "memo/core/tensor.h"

#include <gtest/gtest.h>

#include "memo/backend/caching_allocator.h"
#include "memo/cpu/cpu_backend.h"
#include "test_util.h"

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

TEST(Tensor, a_host_view_becomes_an_f32_host_tensor_with_its_bytes) {
  float buf[12];
  const Tensor t = View<float>(buf, {4, 3});
  EXPECT_EQ(t.dtype(), DType::kF32);
  EXPECT_EQ(t.space(), MemSpace::kHost);
  EXPECT_EQ(t.bytes(), 48);
  const ConstTensor c =
      t.slice_rows(1, 3);  // a Tensor reads as a ConstTensor, dtype and space kept
  EXPECT_EQ(c.data(), static_cast<const void*>(buf + 3));
  EXPECT_EQ(c.dtype(), DType::kF32);
  const View<const float> v = c;
  EXPECT_EQ(v.data(), buf + 3);
  EXPECT_EQ(v.rows(), 2);
}

TEST(Tensor, slices_of_a_bf16_tensor_step_two_bytes_per_element) {
  uint16_t buf[24];
  const Tensor t(buf, {4, 6}, DType::kBF16, MemSpace::kDevice);
  EXPECT_EQ(t.bytes(), 48);
  EXPECT_EQ(t.slice_rows(1, 3).data(), static_cast<void*>(buf + 6));
  EXPECT_EQ(t.slice_cols(2, 5).data(), static_cast<void*>(buf + 2));
  EXPECT_EQ(t.slice_cols(2, 5).ld(), 6);
  EXPECT_EQ(t.part(5, {3}).data(), static_cast<void*>(buf + 5));
  EXPECT_EQ(t.reshape({24}).dtype(), DType::kBF16);
  EXPECT_EQ(t.slice_rows(1, 3).space(), MemSpace::kDevice);
  EXPECT_EQ(t.as<bf16>().data(), reinterpret_cast<bf16*>(buf));
  EXPECT_THROW(t.part(20, {5}), Error);  // past the end
}

TEST(Tensor, reading_another_dtype_or_meta_memory_is_refused) {
  uint16_t buf[8];
  const Tensor t(buf, {8}, DType::kBF16, MemSpace::kHost);
  const std::string m = test::error_message<Error>([&] { (void)t.as<float>(); });
  EXPECT_NE(m.find("a bf16 tensor [8] read as f32"), std::string::npos) << m;
  // a CPU kernel takes f32 only: a bf16 tensor is refused before any element is read
  float out[8];
  EXPECT_THROW(cpu_backend().copy(View<float>(out, {8}), t), Error);
  const Tensor meta(buf, {8}, DType::kF32, MemSpace::kMeta);
  const std::string mm = test::error_message<Error>([&] { (void)meta.as<float>(); });
  EXPECT_NE(mm.find("meta tensor [8] has no values"), std::string::npos) << mm;
  EXPECT_THROW(cpu_backend().fill(meta, 1.0f), Error);
}

TEST(Tensor, allocators_stamp_the_requested_dtype_and_their_space) {
  HostAllocator device(MemSpace::kDevice);
  CachingAllocator alloc(0, device);
  const Tensor a = alloc.acquire("a", {4, 8}, ActKind::kTransient, DType::kBF16);
  EXPECT_EQ(a.dtype(), DType::kBF16);
  EXPECT_EQ(a.space(), MemSpace::kDevice);
  EXPECT_EQ(a.bytes(), 64);
  EXPECT_EQ(alloc.live_bytes(), 64);
  alloc.release(a);
}

}  // namespace memo
