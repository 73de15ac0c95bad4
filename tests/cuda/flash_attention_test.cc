// Note [Flash attention] on the CPU: each block of the fused kernels runs on 128 CPU threads, one a
// GPU thread, with a barrier for __syncthreads and the warp's shuffle and tensor-core product done
// through per-warp exchange slots and barriers. The product rebuilds A, B and C from the 32 lanes'
// fragments by the PTX ISA's layout (mma_a_row/col, ... in flash_attention.h), so the kernels'
// tiling, masking, online softmax and fragment bookkeeping are checked against the CPU's f32
// attention over the same bf16 inputs without a GPU. The product's sums run in k order in f32; the
// tensor cores' order and rounding are the hardware's own, which the GPU test
// (tests/gpu/cuda_backend_check.cc) covers with the same tolerance.
#include "memo/cuda/flash_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/kernel_test_util.h"
#include "memo/backend/attn_mask.h"
#include "memo/core/tensor.h"
#include "memo/cpu/kernels.h"
#include "memo/cuda/chunked_attention.h"
#include "memo/cuda/cuda_sizes.h"
#include "memo/meta/meta_backend.h"

namespace memo::cuda {
namespace {

// A block's shared state on the CPU: its shared memory, the block barrier, and per warp a barrier
// and the slots its lanes exchange registers through. A warp-wide operation is one barrier: each
// lane writes its slot of one of two sets, alternating, waits, reads the others'. A lane can write
// the set again only two operations later, after every lane has passed the barrier between, that
// is after every lane has read it.
struct EmuBlock {
  explicit EmuBlock(int smem_bytes) : smem(size_t(smem_bytes) / 16 + 1) {}
  struct alignas(16) Quad {
    uint32_t w[4];
  };
  std::vector<Quad> smem;  // 16-byte aligned, as the GPU's dynamic shared memory here
  std::barrier<> block{kFlashThreads};
  struct Slots {
    std::array<std::array<uint32_t, 4>, 32> a{};
    std::array<std::array<uint32_t, 2>, 32> b{};
    std::array<float, 32> x{};
    std::array<const uint16_t*, 32> rows{};
  };
  struct Warp {
    std::barrier<> bar{32};
    Slots set[2];
  };
  std::array<Warp, kFlashThreads / 32> warps;
};

float half_of(uint32_t reg, int i) { return from_bf16_bits(uint16_t(i % 2 ? reg >> 16 : reg)); }

struct EmuLane {
  int tid;
  void* smem;
  EmuBlock* blk;
  int phase = 0;  // which slot set this lane's next warp-wide operation uses
  void sync() { blk->block.arrive_and_wait(); }
  EmuBlock::Slots& slots() {
    EmuBlock::Slots& s = blk->warps[size_t(tid / 32)].set[phase];
    phase ^= 1;
    return s;
  }
  void warp_wait() { blk->warps[size_t(tid / 32)].bar.arrive_and_wait(); }
  float shfl_xor(float v, int mask) {
    EmuBlock::Slots& w = slots();
    const int l = tid % 32;
    w.x[size_t(l)] = v;
    warp_wait();
    return w.x[size_t(l ^ mask)];
  }
  // c += A B (16 x 16 by 16 x 8), A and B rebuilt from every lane's fragments.
  void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    EmuBlock::Slots& w = slots();
    const int l = tid % 32;
    std::copy(a, a + 4, w.a[size_t(l)].begin());
    std::copy(b, b + 2, w.b[size_t(l)].begin());
    warp_wait();
    float A[16][16], B[16][8];
    for (int L = 0; L < 32; ++L) {
      for (int i = 0; i < 8; ++i)
        A[mma_a_row(L, i)][mma_a_col(L, i)] = half_of(w.a[size_t(L)][size_t(i / 2)], i);
      for (int i = 0; i < 4; ++i)
        B[mma_b_row(L, i)][mma_b_col(L, i)] = half_of(w.b[size_t(L)][size_t(i / 2)], i);
    }
    for (int i = 0; i < 4; ++i) {
      float sum = 0.0f;
      for (int k = 0; k < 16; ++k) sum += A[mma_c_row(l, i)][k] * B[k][mma_c_col(l, i)];
      c[i] += sum;
    }
  }
  void ldmatrix(uint32_t (&r)[4], const void* row, bool trans);
  void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ldmatrix(r, row, false); }
  void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) { ldmatrix(r, row, true); }
};

// ldmatrix .x4 (.trans): lane l names row l % 8 of matrix l / 8 (8 bf16, 16-byte aligned); it
// receives in register j row l / 4, elements 2 (l % 4) and + 1, of matrix j (of its transpose).
void EmuLane::ldmatrix(uint32_t (&r)[4], const void* row, bool trans) {
  EmuBlock::Slots& w = slots();
  const int l = tid % 32;
  const auto offset = static_cast<const char*>(row) - static_cast<const char*>(smem);
  if (offset % 16 != 0 || offset < 0 ||
      offset + 16 > int64_t(blk->smem.size() * sizeof(EmuBlock::Quad)))
    ADD_FAILURE() << "ldmatrix row address at shared byte " << offset << " (lane " << l << ")";
  w.rows[size_t(l)] = static_cast<const uint16_t*>(row);
  warp_wait();
  for (int j = 0; j < 4; ++j) {
    auto m = [&](int r_, int c) { return w.rows[size_t(8 * j + r_)][c]; };
    const int a = l / 4, b = 2 * (l % 4);
    r[j] = trans ? pack_bits(m(b, a), m(b + 1, a)) : pack_bits(m(a, b), m(a, b + 1));
  }
}

// f(std::integral_constant<int, D>) for the kernels' head dims (flash_head_dim).
template <class F>
void with_head_dim(int64_t D, const F& f) {
  if (D == 32) return f(std::integral_constant<int, 32>{});
  if (D == 64) return f(std::integral_constant<int, 64>{});
  ASSERT_EQ(D, 128);
  f(std::integral_constant<int, 128>{});
}

// Runs one block: body(lane) on each of its threads.
template <class Body>
void run_block(int smem_bytes, const Body& body) {
  EmuBlock blk(smem_bytes);
  std::vector<std::thread> threads;
  for (int tid = 0; tid < kFlashThreads; ++tid)
    threads.emplace_back([&, tid] {
      EmuLane lane{tid, blk.smem.data(), &blk};
      body(lane);
    });
  for (std::thread& t : threads) t.join();
}

TEST(FlashAttention, fragment_layouts_cover_each_element_once) {
  std::set<std::pair<int, int>> a, b, c;
  for (int l = 0; l < 32; ++l) {
    for (int i = 0; i < 8; ++i) a.insert({mma_a_row(l, i), mma_a_col(l, i)});
    for (int i = 0; i < 4; ++i) b.insert({mma_b_row(l, i), mma_b_col(l, i)});
    for (int i = 0; i < 4; ++i) c.insert({mma_c_row(l, i), mma_c_col(l, i)});
  }
  EXPECT_EQ(a.size(), 256u);  // 16 x 16
  EXPECT_EQ(b.size(), 128u);  // 16 x 8
  EXPECT_EQ(c.size(), 128u);  // 16 x 8
  // the C fragments of two adjacent n-tiles are the A fragment of their k-step (P V, dS K)
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 8; ++i) {
      const int tile = i / 4, ci = i % 4;
      EXPECT_EQ(mma_a_row(l, i), mma_c_row(l, ci));
      EXPECT_EQ(mma_a_col(l, i), 8 * tile + mma_c_col(l, ci));
    }
}

// [rows, cols] bf16 with row stride ld (padding holds a marker no kernel may overwrite).
constexpr uint16_t kPadBits = 0x7fc1;  // a NaN
struct Mat16 {
  int64_t rows, cols, ld;
  std::vector<uint16_t> v;
  Mat16(int64_t r, int64_t c, int64_t l) : rows(r), cols(c), ld(l), v(size_t(r * l), kPadBits) {}
  static Mat16 random(int64_t r, int64_t c, int64_t l, uint64_t seed, float lo, float hi) {
    Mat16 m(r, c, l);
    const std::vector<float> x = test::random_floats(r * c, seed, lo, hi);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) m.v[size_t(i * l + j)] = to_bf16_bits(x[size_t(i * c + j)]);
    return m;
  }
  std::vector<float> widened() const {  // rows x cols, contiguous
    std::vector<float> out(size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        out[size_t(i * cols + j)] = from_bf16_bits(v[size_t(i * ld + j)]);
    return out;
  }
  bool padding_intact() const {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = cols; j < ld; ++j)
        if (v[size_t(i * ld + j)] != kPadBits) return false;
    return true;
  }
};

double err_vs_max(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0.0, mag = 1.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i])) return std::numeric_limits<double>::infinity();
    err = std::max(err, double(std::abs(got[i] - want[i])));
    mag = std::max(mag, double(std::abs(want[i])));
  }
  return err / mag;
}

struct Case {
  int64_t B, S, H, Hkv, D;
};

// The bf16 tolerance of Note [Chunked attention] (tests/cuda/bodies_test.cc's kAttnBf16Tol: 4u of
// max(|ref|, 1), u = 2^-8): the fused kernels round the same operands (P unnormalised, in [0, 1],
// and dS) once before their products.
constexpr double kBf16Tol = 4.0 / 256.0;

// Returns the largest errors of o, dq, dk, dv against the CPU's f32 attention over the same inputs.
// wide: every loaded row on 16 bytes (16-byte loads, Note [Flash tile loads]), else rows of an even
// number of elements that is not a multiple of 8 (4-byte loads).
std::vector<double> check_flash(const Case& c, AttnMask mask, bool wide) {
  const int64_t B = c.B, S = c.S, H = c.H, Hkv = c.Hkv, D = c.D, T = B * S;
  const bool causal = mask.causal;
  SCOPED_TRACE(::testing::Message()
               << "B" << B << " S" << S << " H" << H << " Hkv" << Hkv << " D" << D
               << (causal ? " causal" : " full") << (wide ? " wide" : ""));
  // q and v strided as the model's column slices are
  const int64_t pad = wide ? 8 : 6;
  const Mat16 q = Mat16::random(T, H * D, H * D + pad, 301, -2.0f, 2.0f),
              k = Mat16::random(T, Hkv * D, Hkv * D, 302, -2.0f, 2.0f),
              v = Mat16::random(T, Hkv * D, Hkv * D + (wide ? 16 : 2), 303, -1.0f, 1.0f),
              dout = Mat16::random(T, H * D, H * D, 304, -1.0f, 1.0f);
  std::vector<float> qf = q.widened(), kf = k.widened(), vf = v.widened(), dof = dout.widened();
  auto view = [](std::vector<float>& x, int64_t cols) {
    return View<float>(x.data(), {int64_t(x.size()) / cols, cols});
  };
  // the CPU reference, f32 over the widened inputs; the backward from its o rounded to bf16
  std::vector<float> o_ref(size_t(T * H * D)), lse_ref(size_t(B * H * S));
  std::vector<float> fs(size_t(cpu::attention_forward_scratch_numel(D)));
  cpu::attention_forward(view(o_ref, H * D), View<float>(lse_ref.data(), {B, H, S}),
                         view(qf, H * D), view(kf, Hkv * D), view(vf, Hkv * D), B, H, Hkv,
                         View<float>(fs.data(), {int64_t(fs.size())}), mask);
  Mat16 o_in(T, H * D, H * D);
  for (size_t i = 0; i < o_ref.size(); ++i) o_in.v[i] = to_bf16_bits(o_ref[i]);
  std::vector<float> o_inf = o_in.widened();
  std::vector<float> dq_ref(size_t(T * H * D)), dk_ref(size_t(T * Hkv * D)),
      dv_ref(size_t(T * Hkv * D));
  std::vector<float> bs(size_t(cpu::attention_backward_scratch_numel(S, D, H, Hkv)));
  cpu::attention_backward(view(dq_ref, H * D), view(dk_ref, Hkv * D), view(dv_ref, Hkv * D),
                          view(dof, H * D), view(qf, H * D), view(kf, Hkv * D), view(vf, Hkv * D),
                          view(o_inf, H * D), View<float>(lse_ref.data(), {B, H, S}), B, H, Hkv,
                          View<float>(bs.data(), {int64_t(bs.size())}), mask);

  FlashArgs f;
  f.S = S, f.H = H, f.G = H / Hkv, f.D = D, f.causal = causal;
  f.scale = 1.0f / std::sqrt(float(D));
  f.q = q.v.data(), f.ldq = q.ld, f.k = k.v.data(), f.ldk = k.ld, f.v = v.v.data(), f.ldv = v.ld;
  Mat16 o(T, H * D, H * D + 4);
  std::vector<float> lse(size_t(B * H * S), std::numeric_limits<float>::quiet_NaN());
  f.o = o.v.data(), f.ldo = o.ld, f.lse = lse.data();
  f.dout = dout.v.data(), f.lddo = dout.ld;
  f.wide = flash_wide_loads(f);
  EXPECT_EQ(f.wide, wide);
  const int64_t tiles = (S + kFlashRows - 1) / kFlashRows;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t tile = 0; tile < tiles; ++tile)
        run_block(flash_forward_smem(int(D)), [&](EmuLane& th) {
          with_head_dim(D,
                        [&](auto d) { flash_forward_block<d()>(th, f, b, h, tile * kFlashRows); });
        });
  std::vector<double> errs{err_vs_max(o.widened(), o_ref)};
  EXPECT_LE(errs.back(), kBf16Tol) << "o";
  EXPECT_TRUE(o.padding_intact());
  // lse from f32 scores of the same inputs, the products' sums in another order
  double lse_err = 0.0;
  for (size_t i = 0; i < lse.size(); ++i)
    lse_err =
        std::max(lse_err, std::isnan(lse[i]) ? 1.0
                                             : double(std::abs(lse[i] - lse_ref[i])) /
                                                   std::max(1.0, double(std::abs(lse_ref[i]))));
  EXPECT_LE(lse_err, 1e-5) << "lse";

  // the backward from the reference's o (rounded) and lse, dq/dk/dv starting as NaN
  Mat16 dq(T, H * D, H * D + 2), dk(T, Hkv * D, Hkv * D + 8), dv(T, Hkv * D, Hkv * D);
  f.o_in = o_in.v.data(), f.ldo = o_in.ld, f.dout = dout.v.data(), f.lddo = dout.ld;
  f.dq = dq.v.data(), f.lddq = dq.ld, f.dk = dk.v.data(), f.lddk = dk.ld, f.dv = dv.v.data(),
  f.lddv = dv.ld, f.lse = lse_ref.data();
  std::vector<float> delta(size_t(H * S));
  for (int64_t b = 0; b < B; ++b) {
    const XMat xdo{const_cast<uint16_t*>(dout.v.data()), T, H * D, dout.ld, true};
    const XMat xo{o_in.v.data(), T, H * D, o_in.ld, true};
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i) chunk_delta_item(delta.data(), xdo, xo, S, D, b, h, i);
    f.delta = delta.data();
    for (int64_t h = 0; h < H; ++h)
      for (int64_t tile = 0; tile < tiles; ++tile)
        run_block(flash_backward_smem(int(D)), [&](EmuLane& th) {
          with_head_dim(D, [&](auto d) { flash_dq_block<d()>(th, f, b, h, tile * kFlashRows); });
        });
    for (int64_t hk = 0; hk < Hkv; ++hk)
      for (int64_t tile = 0; tile < tiles; ++tile)
        run_block(flash_backward_smem(int(D)), [&](EmuLane& th) {
          with_head_dim(D, [&](auto d) { flash_dkdv_block<d()>(th, f, b, hk, tile * kFlashRows); });
        });
  }
  for (const auto& [name, got, want] :
       {std::tuple{"dq", &dq, &dq_ref}, std::tuple{"dk", &dk, &dk_ref},
        std::tuple{"dv", &dv, &dv_ref}}) {
    errs.push_back(err_vs_max(got->widened(), *want));
    EXPECT_LE(errs.back(), kBf16Tol) << name;
    EXPECT_TRUE(got->padding_intact()) << name;
  }
  return errs;
}

TEST(FlashAttention, blocks_on_cpu_threads_match_the_cpu_attention_within_bf16_rounding) {
  std::vector<double> worst(4, 0.0);
  // a short tile, two sequences, GQA 2; head dim 128, GQA 2; one exact tile with one query head
  // per kv head; a single token; head dim 32 over two tiles (the second short), GQA 2
  const Case cases[] = {Case{2, 37, 4, 2, 64}, Case{1, 60, 2, 1, 128}, Case{1, 64, 2, 2, 64},
                        Case{1, 1, 2, 1, 64}, Case{1, 100, 2, 1, 32}};
  // 16-byte and 4-byte loads in turn, so each meets both masks and every other case
  bool wide = false;
  for (AttnMask mask : {AttnMask::kCausal, AttnMask::kFull})
    for (const Case& c : cases) {
      const std::vector<double> e = check_flash(c, mask, wide = !wide);
      for (size_t i = 0; i < 4; ++i) worst[i] = std::max(worst[i], e[i]);
    }
  std::printf(
      "flash attention (emulated), largest error / max(|f32|, 1): o %.2e (%.2fu), dq %.2e, "
      "dk %.2e, dv %.2e\n",
      worst[0], worst[0] * 256, worst[1], worst[2], worst[3]);
}

// A bf16 plan of a CUDA run sizes the fused kernels' scratch (delta of one sequence, backward),
// where the head dim has them, and the chunked schedule's otherwise; an f32 plan the chunked one.
TEST(FlashAttention, bf16_cuda_plans_size_the_fused_kernels_scratch) {
  CudaSizes sizes;
  MetaBackend f32(sizes, DType::kF32), bf16(sizes, DType::kBF16);
  const int64_t S = 4096, H = 32, Hkv = 8;
  EXPECT_EQ(bf16.attention_forward_scratch_numel(S, 64, H, Hkv), 1);
  EXPECT_EQ(bf16.attention_backward_scratch_numel(S, 128, H, Hkv), S * H);
  EXPECT_EQ(f32.attention_backward_scratch_numel(S, 64, H, Hkv),
            cuda_attention_backward_scratch_numel(S, 64, H, Hkv));
  EXPECT_GT(f32.attention_backward_scratch_numel(S, 64, H, Hkv), 100 * S * H);
  EXPECT_EQ(bf16.attention_forward_scratch_numel(S, 32, H, Hkv), 1);
  EXPECT_EQ(bf16.attention_forward_scratch_numel(S, 96, H, Hkv),
            cuda_attention_forward_scratch_numel(S, 96, H, Hkv));
}

}  // namespace
}  // namespace memo::cuda
