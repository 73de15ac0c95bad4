// The meta backend (Note [Meta backend]): every op runs the CPU op's entry checks and touches no
// byte (its buffers are PROT_NONE address ranges: a touch would crash this test), reductions
// return 0, copies to the host give zeros; sizes come from the target backend.
#include "memo/meta/meta_backend.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memo/backend/backend.h"
#include "memo/backend/bf16_storage.h"
#include "memo/core/error.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/cuda/cuda_sizes.h"
#include "test_util.h"

namespace memo {
namespace {

// A [rows, cols] f32 view of fresh meta memory.
Tensor meta_tensor(MetaBackend& meta, std::vector<RawBuffer>& keep, Shape shape) {
  keep.emplace_back(meta.allocator(MemSpace::kMeta), shape.numel() * 4, "test");
  return keep.back().tensor(shape, DType::kF32);
}

TEST(MetaBackend, runs_a_layers_kernels_without_touching_memory) {
  MetaBackend meta(cpu_backend());
  std::vector<RawBuffer> keep;
  const int64_t B = 2, S = 300, T = B * S, H = 4, Hkv = 2, D = 16, C = H * D, F = 96;
  Tensor x = meta_tensor(meta, keep, {T, C}), y = meta_tensor(meta, keep, {T, C});
  Tensor r = meta_tensor(meta, keep, {T}), w = meta_tensor(meta, keep, {C});
  Tensor wq = meta_tensor(meta, keep, {C, C}), wk = meta_tensor(meta, keep, {Hkv * D, C});
  Tensor q = meta_tensor(meta, keep, {T, C}), k = meta_tensor(meta, keep, {T, Hkv * D});
  Tensor v = meta_tensor(meta, keep, {T, Hkv * D}), o = meta_tensor(meta, keep, {T, C});
  Tensor lse = meta_tensor(meta, keep, {B, H, S});
  Tensor cos = meta_tensor(meta, keep, {S, D / 2}), sin = meta_tensor(meta, keep, {S, D / 2});
  Tensor g = meta_tensor(meta, keep, {T, F}), u = meta_tensor(meta, keep, {T, F});
  Tensor scratch = meta_tensor(meta, keep, {meta.attention_backward_scratch_numel(S, D, H, Hkv)});
  Backend& be = meta;  // as the layers call it
  be.rmsnorm_forward(y, r, x, w, 1e-5f);
  be.matmul_token_panels(q, y, wq);
  be.matmul_token_panels(k, y, wk);
  be.rope_table(cos, sin, rope_inv_freq(D, 10000.0));
  be.rope_forward(q, cos, sin, D);
  be.attention_forward(o, lse, q, k, v, B, H, Hkv, scratch, AttnMask::kCausal);
  be.attention_backward(q, k, v, o, q, k, v, o, lse, B, H, Hkv, scratch, AttnMask::kCausal);
  be.swiglu_forward(g, g, u);
  be.fill(x, 1.0f);
  be.add_into(x, y);
  be.copy(y, x);
  EXPECT_EQ(be.sum(r), 0.0);
  EXPECT_EQ(be.sum_squares(x), 0.0);
  float host[4] = {1, 2, 3, 4};
  be.copy_to_host(host, x.data(), sizeof host);
  EXPECT_EQ(host[0], 0.0f);
  EXPECT_EQ(host[3], 0.0f);
  EXPECT_FALSE(meta.has_values());
  EXPECT_FALSE(meta.host_can_access(MemSpace::kMeta));
}

TEST(MetaBackend, rejects_the_shapes_the_cpu_kernels_reject_with_the_same_message) {
  MetaBackend meta(cpu_backend());
  std::vector<RawBuffer> keep;
  std::vector<float> host(64 * 64);
  auto both = [&](auto&& call) {
    const std::string m = test::error_message<Error>([&] {
      call(meta, meta_tensor(meta, keep, {8, 8}), View<float>(host.data(), {8, 8}));
    });
    const std::string c = test::error_message<Error>([&] {
      call(cpu_backend(), View<float>(host.data(), {8, 8}), View<float>(host.data(), {8, 8}));
    });
    EXPECT_FALSE(m.empty());
    EXPECT_EQ(m, c);
  };
  // y [8, 8] from x [8, 8] with a weight of the wrong width
  both([&](Backend& be, Tensor a, Tensor) {
    be.rmsnorm_forward(a, a.part(0, {8}), a, a.part(0, {7}), 1e-5f);
  });
  // a [8, 8] @ b^T with b [4, 7]: inner dimensions differ
  both([&](Backend& be, Tensor a, Tensor) { be.matmul(a, a, a.part(0, {4, 7}), false, true); });
  // copy between different element counts
  both([&](Backend& be, Tensor a, Tensor) { be.copy(a, a.part(0, {3})); });
  // attention with 3 query heads over 2 kv heads
  both([&](Backend& be, Tensor a, Tensor) {
    be.attention_forward(a, a.part(0, {1, 3, 8}), a, a, a, 1, 3, 2, a, AttnMask::kCausal);
  });
}

TEST(MetaBackend, checks_token_ids_on_the_host_like_the_cpu) {
  MetaBackend meta(cpu_backend());
  std::vector<RawBuffer> keep;
  const std::vector<int32_t> ids = {0, 5, 9};
  Tensor x = meta_tensor(meta, keep, {3, 4}), wte = meta_tensor(meta, keep, {9, 4});
  const std::string msg = test::error_message<DataError>(
      [&] { meta.embedding_forward(x, View<const int32_t>(ids.data(), {3}), wte); });
  EXPECT_NE(msg.find("token id 9 at position 2"), std::string::npos) << msg;
}

// An attention call over f32 activations beside bf16 layers (the KV decoder's, which computes in
// f32) needs the f32 schedule's scratch, not the bf16 kernels'. On a bf16 CUDA run the fused bf16
// attention needs one float and the f32 schedule thousands: the first GPU run's memo generate
// failed there (2026-12-04). The meta backend sized as CUDA (CudaSizes) checks scratch as the CUDA
// kernels do, so this finds it without a GPU.
TEST(MetaBackend, f32_attention_beside_bf16_layers_gets_the_f32_schedules_scratch) {
  CudaSizes cuda_sizes;
  MetaBackend meta(cuda_sizes, DType::kBF16);
  Bf16StorageBackend bf16(cuda_sizes);
  const int64_t S = 40, H = 4, Hkv = 2, D = 64;
  std::vector<RawBuffer> keep;
  Tensor q = meta_tensor(meta, keep, {S, H * D}), o = meta_tensor(meta, keep, {S, H * D});
  Tensor k = meta_tensor(meta, keep, {S, Hkv * D}), v = meta_tensor(meta, keep, {S, Hkv * D});
  Tensor lse = meta_tensor(meta, keep, {1, H, S});
  const int64_t f32_numel = meta.f32_attention_forward_scratch_numel(S, D, H, Hkv);
  EXPECT_EQ(f32_numel, cuda_sizes.attention_forward_scratch_numel(S, D, H, Hkv));
  EXPECT_EQ(bf16.f32_attention_forward_scratch_numel(S, D, H, Hkv), f32_numel);
  // the layers' own calls (bf16 activations) need the fused kernels' one float
  EXPECT_EQ(meta.attention_forward_scratch_numel(S, D, H, Hkv), 1);
  EXPECT_EQ(bf16.attention_forward_scratch_numel(S, D, H, Hkv), 1);
  EXPECT_GT(f32_numel, 1);
  Backend& be = meta;
  EXPECT_NO_THROW(be.attention_forward(o, lse, q, k, v, 1, H, Hkv,
                                       meta_tensor(meta, keep, {f32_numel}), AttnMask::kCausal));
  EXPECT_THROW(be.attention_forward(o, lse, q, k, v, 1, H, Hkv, meta_tensor(meta, keep, {1}),
                                    AttnMask::kCausal),
               Error);
}

TEST(MetaBackend, takes_sizes_and_row_granularity_from_its_target) {
  MetaBackend meta(cpu_backend());
  EXPECT_EQ(meta.reproducible_rows(), cpu_backend().reproducible_rows());
  EXPECT_EQ(meta.attention_forward_scratch_numel(1000, 64, 8, 2),
            cpu_backend().attention_forward_scratch_numel(1000, 64, 8, 2));
  EXPECT_EQ(meta.attention_backward_scratch_numel(1000, 64, 8, 2),
            cpu_backend().attention_backward_scratch_numel(1000, 64, 8, 2));
  // and its native bf16 kernels, so a bf16 trace widens what the run widens
  EXPECT_EQ(meta.bf16_products(), cpu_backend().bf16_products());    // AMX or AVX512-BF16
  EXPECT_EQ(meta.bf16_attention(), cpu_backend().bf16_attention());  // AMD's AVX512-BF16
  CpuBackend f32_kernels(
      CpuOptions{.bf16_products = false, .bf16_attention = false, .bf16_elementwise = false});
  EXPECT_FALSE(MetaBackend(f32_kernels).bf16_products());
  struct Native final : CpuBackend {
    bool bf16_products() const override { return true; }
    bool bf16_attention() const override { return true; }
    bool bf16_elementwise() const override { return true; }
  } native;
  MetaBackend over_native(native);
  EXPECT_TRUE(over_native.bf16_products());
  EXPECT_TRUE(over_native.bf16_attention());
  EXPECT_TRUE(over_native.bf16_elementwise());
  EXPECT_EQ(meta.bf16_elementwise(), cpu_backend().bf16_elementwise());  // every CPU
  EXPECT_FALSE(MetaBackend(f32_kernels).bf16_elementwise());
}

TEST(CpuBackend, sum_adds_in_index_order_in_double) {
  // 2^24 + 1 + 1 + ...: float accumulation would stick at 2^24; double in order does not.
  std::vector<float> x(1001, 1.0f);
  x[0] = 16777216.0f;
  double want = 0.0;
  for (float v : x) want += v;
  EXPECT_EQ(cpu_backend().sum(View<const float>(x.data(), {int64_t(x.size())})), want);
  EXPECT_EQ(want, 16777216.0 + 1000.0);
}

}  // namespace
}  // namespace memo
