// Note [Flash attention] on the CPU: each block of the fused kernels runs as 128 fibers, one a GPU
// thread, with a barrier for __syncthreads and the warp's shuffle and tensor-core product done
// through per-warp exchange slots and barriers. The product rebuilds A, B and C from the 32 lanes'
// fragments by the PTX ISA's layout (mma_a_row/col, ... in flash_attention.h), so the kernels'
// tiling, masking, online softmax and fragment bookkeeping are checked against the CPU's f32
// attention over the same bf16 inputs without a GPU. The product's sums run in k order in f32; the
// tensor cores' order and rounding are the hardware's own, which the GPU test
// (tests/gpu/cuda_backend_check.cc) covers with the same tolerance.
//
// The fibers (ucontext's, switched at each barrier, round robin) give the lanes what threads did,
// each its own stack and a wait that lets the others run, without the kernel's scheduler: as 128
// OS threads a block spent its time waking threads at barriers (the test took 32 s on 2 cores,
// 80 s beside another test and 38 s under AddressSanitizer; as fibers 5 s and 10 s).
#include "memo/cuda/flash_attention.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <ucontext.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <set>
#include <string>
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

// What AddressSanitizer is told of a switch of stacks (nothing without it).
void start_switch(void** fake_save, const void* bottom, size_t size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(fake_save, bottom, size);
#else
  (void)fake_save, (void)bottom, (void)size;
#endif
}
void finish_switch(void* fake, const void** bottom_old, size_t* size_old) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake, bottom_old, size_old);
#else
  (void)fake, (void)bottom_old, (void)size_old;
#endif
}

// The lanes of one block as fibers, run round robin from the test's own stack: a lane runs until
// it waits at a barrier (yield()) or returns. AddressSanitizer is told of every switch of stacks.
class Fibers {
 public:
  // A lane's stack: the kernels' deepest use is under 6 KiB (5.5 under AddressSanitizer, measured
  // by a fill pattern), and a page below it that faults on an overflow. Small, because
  // AddressSanitizer clears a stack's shadow at every switch to it.
  static constexpr size_t kStack = size_t(64) << 10, kGuard = size_t(4) << 10;
  // Runs body(i) for i in [0, n) as n fibers until every one has returned.
  template <class Body>
  void run(int n, const Body& body) {
    stacks_.resize(size_t(n));
    lanes_.assign(size_t(n), Lane{});
    const std::function<void(int)> f = body;
    body_ = &f;
    running_ = this;
    for (int i = 0; i < n; ++i) {
      Lane& lane = lanes_[size_t(i)];
      if (!stacks_[size_t(i)]) stacks_[size_t(i)] = Stack();
      getcontext(&lane.ctx);
      lane.ctx.uc_stack.ss_sp = stacks_[size_t(i)].base;
      lane.ctx.uc_stack.ss_size = kStack;
      lane.ctx.uc_link = nullptr;  // a lane switches back itself (entry), never returns
      makecontext(&lane.ctx, &Fibers::entry, 0);
    }
    for (int left = n; left > 0;)
      for (int i = 0; i < n; ++i) {
        if (lanes_[size_t(i)].done) continue;
        switch_to(i);
        left -= lanes_[size_t(i)].done ? 1 : 0;
      }
    body_ = nullptr;
  }
  // From a lane: lets the others run; returns when the scheduler comes back to it.
  void yield() { leave(&lanes_[size_t(current_)].fake); }

 private:
  struct Lane {
    ucontext_t ctx{};
    bool done = false;
    void* fake = nullptr;  // AddressSanitizer's fake stack of the lane while it is switched out
  };
  void switch_to(int i) {
    current_ = i;
    void* fake = nullptr;
    start_switch(&fake, stacks_[size_t(i)].base, kStack);
    swapcontext(&main_, &lanes_[size_t(i)].ctx);
    finish_switch(fake, nullptr, nullptr);
  }
  // Back to the scheduler's stack; fake_save null: this lane is done for good.
  void leave(void** fake_save) {
    Lane& lane = lanes_[size_t(current_)];
    start_switch(fake_save, main_bottom_, main_size_);
    swapcontext(&lane.ctx, &main_);
    finish_switch(fake_save ? *fake_save : nullptr, &main_bottom_, &main_size_);
  }
  static void entry() {
    Fibers& self = *running_;
    finish_switch(nullptr, &self.main_bottom_, &self.main_size_);
    (*self.body_)(self.current_);
    self.lanes_[size_t(self.current_)].done = true;
    self.leave(nullptr);
  }

  struct Stack {  // kStack bytes at base, the guard page below
    char* base = nullptr;
    Stack() {
      void* p = mmap(nullptr, kGuard + kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      mprotect(p, kGuard, PROT_NONE);
      base = static_cast<char*>(p) + kGuard;
    }
    Stack(Stack&& o) noexcept : base(std::exchange(o.base, nullptr)) {}
    Stack& operator=(Stack&& o) noexcept {
      std::swap(base, o.base);
      return *this;
    }
    ~Stack() {
      if (base) munmap(base - kGuard, kGuard + kStack);
    }
    explicit operator bool() const { return base != nullptr; }
  };
  std::vector<Stack> stacks_;  // kept from block to block
  std::vector<Lane> lanes_;
  const std::function<void(int)>* body_ = nullptr;
  ucontext_t main_{};
  const void* main_bottom_ = nullptr;
  size_t main_size_ = 0;
  int current_ = 0;
  static inline thread_local Fibers* running_ = nullptr;  // the one whose lanes entry() starts
};

// A barrier of `expected` lanes among the fibers: the last to arrive opens it and goes on, the
// others yield until it has opened.
struct FiberBarrier {
  explicit FiberBarrier(int n) : expected(n) {}
  void arrive_and_wait(Fibers& fibers) {
    const uint64_t phase = opened;
    if (++arrived == expected) {
      arrived = 0;
      ++opened;
      return;
    }
    while (opened == phase) fibers.yield();
  }
  int expected, arrived = 0;
  uint64_t opened = 0;
};

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
  FiberBarrier block{kFlashThreads};
  Fibers* fibers = nullptr;
  struct Slots {
    std::array<std::array<uint32_t, 4>, 32> a{};
    std::array<std::array<uint32_t, 2>, 32> b{};
    std::array<float, 32> x{};
    std::array<const uint16_t*, 32> rows{};
  };
  struct Warp {
    FiberBarrier bar{32};
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
  void sync() { blk->block.arrive_and_wait(*blk->fibers); }
  EmuBlock::Slots& slots() {
    EmuBlock::Slots& s = blk->warps[size_t(tid / 32)].set[phase];
    phase ^= 1;
    return s;
  }
  void warp_wait() { blk->warps[size_t(tid / 32)].bar.arrive_and_wait(*blk->fibers); }
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

// Runs one block: body(lane) on each of its threads, as fibers.
template <class Body>
void run_block(int smem_bytes, const Body& body) {
  static Fibers fibers;  // its stacks serve every block
  EmuBlock blk(smem_bytes);
  blk.fibers = &fibers;
  fibers.run(kFlashThreads, [&](int tid) {
    EmuLane lane{tid, blk.smem.data(), &blk};
    body(lane);
  });
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
               << (causal ? " causal" : " full") << (mask.key_start.empty() ? "" : " key_start")
               << (wide ? " wide" : ""));
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
  std::vector<float> fs(size_t(cpu::attention_forward_scratch_numel(D, H, Hkv)));
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
  f.key_start = mask.key_start.empty() ? nullptr : mask.key_start.data();
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

TEST(FlashAttention, blocks_run_as_fibers_match_the_cpu_attention_within_bf16_rounding) {
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

// A mask's key_start (backend/attn_mask.h): packed documents whose starts fall inside a tile, on
// a tile's edge (64, 128) and one token long (128); a sliding window of 40 (every row's first key
// inside a tile); a full mask whose first keys run from before the keys to past them (context
// parallelism's chunk pairs: the last rows see nothing, o = 0 and lse = -inf). The skipped
// tiles and the masked columns against the CPU attention with the same mask.
TEST(FlashAttention, key_start_masks_match_the_cpu_attention_within_bf16_rounding) {
  const int64_t S = 150;
  std::vector<int32_t> docs(2 * S), window(S), full(S);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0, start = 0; i < S; ++i) {
      for (int64_t s : b == 0 ? std::vector<int64_t>{50, 64, 128, 129} : std::vector<int64_t>{90})
        if (i == s) start = s;
      docs[size_t(b * S + i)] = int32_t(start);
    }
  for (int64_t i = 0; i < S; ++i) {
    window[size_t(i)] = int32_t(std::max<int64_t>(0, i - 39));
    full[size_t(i)] = int32_t(2 * i - 100);  // -100 .. 198: none (>= 150) from row 125
  }
  bool wide = false;
  std::vector<double> worst(4, 0.0);
  for (const auto& [c, mask] :
       {std::pair{Case{2, S, 2, 1, 32},
                  AttnMask::causal_from(View<const int32_t>(docs.data(), {2 * S}))},
        std::pair{Case{1, S, 1, 1, 32},
                  AttnMask::causal_from(View<const int32_t>(window.data(), {S}))},
        std::pair{Case{1, S, 1, 1, 64},
                  AttnMask::full_from(View<const int32_t>(full.data(), {S}))}}) {
    const std::vector<double> e = check_flash(c, mask, wide = !wide);
    for (size_t i = 0; i < 4; ++i) worst[i] = std::max(worst[i], e[i]);
  }
  std::printf(
      "flash attention with key_start (emulated), largest error: o %.2e, dq %.2e, dk %.2e, "
      "dv %.2e\n",
      worst[0], worst[1], worst[2], worst[3]);
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
