// Note [Flash attention]
// CUDA's bf16 attention fused into one kernel forward and two backward, FlashAttention-2's
// schedule (Dao 2023) on the tensor cores' warp-level product mma.sync.m16n8k16 (bf16 in, f32
// accumulate), with memo's semantics (cpu/kernels.h: causal or full, grouped-query heads,
// lse = m + log l of the scaled scores, [B, H, S] f32):
//
//   forward (a block: 64 query rows of one head; 4 warps of 16 rows): for each tile of 64 keys,
//     S = scale Q K^T in registers, the running row max m and sum l (online softmax), O = O c +
//     P V with P rounded to bf16; O / l and lse written once. No score leaves the chip.
//   backward, deterministic (no atomics; delta = rowsum(dO . O) first, f32):
//     dQ kernel (64 query rows of one head): for each key tile, P = exp(S - lse),
//       dS = P (dP - delta) with dP = dO V^T, dQ += dS K; written once.
//     dK/dV kernel (64 keys of one kv head): for each query head of its group and each query tile,
//       the same P^T and dS^T computed key-major (S^T = K Q^T), dV += P^T dO, dK += dS^T Q; the
//       G heads added in head order; written once.
//   Each backward kernel recomputes the scores (FlashAttention-2 recomputes them once and adds
//   dQ with atomics, whose order is not fixed).
//
// The bodies below are functions of one thread (Lane), called by each of a block's 128 threads;
// Lane supplies the block barrier, the warp shuffle, the warp's product and its shared-memory
// matrix loads. On the GPU those are __syncthreads, __shfl_xor_sync and the mma and ldmatrix
// instructions (cuda/attention.cu); the tests run a block as 128 fibers with barriers, a
// product that rebuilds the matrices from every lane's
// fragments by the PTX ISA's layout (mma_*_row/col below), so the kernels' logic, tiling and
// fragment bookkeeping are checked on machines without a GPU (tests/cuda/flash_attention_test.cc).
// Fragments come from shared memory by ldmatrix (.x4, and .trans where the operand is read down its
// columns: V in P V, K in dS K, dO and Q in the dK/dV products); tiles reach shared memory as Note
// [Flash tile loads] says. The emulation of ldmatrix follows
// the PTX ISA's distribution (thread l receives row l / 4, elements 2 (l % 4) and + 1, of each
// 8 x 8 matrix, or of its transpose) and checks that every row address is 16-byte aligned.
//
// Head dims 32, 64 and 128 (flash_head_dim); others, f32 activations, and unaligned tensors take
// the chunked schedule (Note [Chunked attention]). A mask's key_start (document masks, sliding
// windows, context parallelism's chunk pairs) skips the key tiles before a tile's first row's
// first key and masks the columns before each row's: tested on CPU threads, not yet run on a GPU.
// First run on an H200 on 2026-12-04 (correct;
// bench/RESULTS.md has its speed against PyTorch's SDPA).
//
// Note [Flash tile loads]
// A tile (64 rows of one head's D columns) moves from global to shared memory in 16-byte pieces of
// a row: thread tid takes pieces tid, tid + 128, ... (piece e: row e / (D / 8), columns 8 (e % (D /
// 8)) on); a loop iteration's two tiles (K and V, or Q and dO) are fetched into registers
// (FlashPieces: all loads in flight at once), then stored. Where every row of q, k, v and dout
// starts on 16 bytes (FlashArgs::wide: flash_wide_loads), a piece is one 16-byte load; else four
// 4-byte ones. With these loads and no mask arithmetic on tiles that every row of a warp sees
// whole ("open"), forward + backward on the H200 (2026-12-04, bench/cuda/attention_bench.cc, 32
// heads over 8 of 64, causal) went from 4.74 ms to 3.63 ms at 4K tokens and from 211 ms to 160 ms
// at 32K, against the first version's 4-byte loads, each waiting for the last. Fetching the next
// tile while computing on this one was measured too and dropped: it cost 30 to 90 registers a
// thread, so fewer blocks a multiprocessor, and was slower at every size (178 ms at 32K; at head
// dim 128, 324 ms against 261).

#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "memo/cuda/bodies.h"

namespace memo::cuda {

inline constexpr int kFlashRows = 64;      // query rows (forward, dQ) or keys (dK/dV) of a block
inline constexpr int kFlashCols = 64;      // keys (forward, dQ) or query rows (dK/dV) of a tile
inline constexpr int kFlashThreads = 128;  // 4 warps of 16 rows
MEMO_HD constexpr bool flash_head_dim(int64_t d) { return d == 32 || d == 64 || d == 128; }
MEMO_HD constexpr int flash_pitch(int d) { return d + 8; }  // smem row, bf16: staggers the banks

// Shared memory of a block in bytes: forward Q, K, V tiles; backward four tiles and, for dK/dV,
// the tile's lse and delta.
constexpr int flash_forward_smem(int d) { return 3 * kFlashRows * flash_pitch(d) * 2; }
constexpr int flash_backward_smem(int d) {  // + the query tile's lse, delta and key_start
  return 4 * kFlashRows * flash_pitch(d) * 2 + 3 * kFlashCols * 4;
}

// The fragments of mma.m16n8k16 with bf16 A and B and f32 C (PTX ISA, "Matrix Fragments for
// mma.m16n8k16 with floating point type"): lane l, group g = l / 4, t = l % 4. A (16 x 16, row
// major): register r holds elements 2r, 2r+1 (low half first); B (16 x 8): register r holds 2r,
// 2r+1; C (16 x 8): four floats.
MEMO_HD constexpr int mma_a_row(int lane, int i) { return lane / 4 + ((i / 2) % 2) * 8; }
MEMO_HD constexpr int mma_a_col(int lane, int i) { return (lane % 4) * 2 + i % 2 + (i / 4) * 8; }
MEMO_HD constexpr int mma_b_row(int lane, int i) { return (lane % 4) * 2 + i % 2 + (i / 2) * 8; }
MEMO_HD constexpr int mma_b_col(int lane, int) { return lane / 4; }
MEMO_HD constexpr int mma_c_row(int lane, int i) { return lane / 4 + (i / 2) * 8; }
MEMO_HD constexpr int mma_c_col(int lane, int i) { return (lane % 4) * 2 + i % 2; }

MEMO_HD inline uint32_t pack_bf16(float lo, float hi) {
  return uint32_t(to_bf16_bits(lo)) | (uint32_t(to_bf16_bits(hi)) << 16);
}
MEMO_HD inline uint32_t pack_bits(uint16_t lo, uint16_t hi) {
  return uint32_t(lo) | (uint32_t(hi) << 16);
}
MEMO_HD inline uint32_t load_pair(const uint16_t* p) {  // two bf16, 4-byte aligned
  return *reinterpret_cast<const uint32_t*>(p);
}
MEMO_HD inline void store_pair(uint16_t* p, uint32_t v) { *reinterpret_cast<uint32_t*>(p) = v; }

// The tensors of one call: bf16 matrices of token rows (row t = b S + s), a head's D columns at
// h D; ld in elements. lse [B, H, S]; delta [H, S] of sequence b (the backward's).
struct FlashArgs {
  int64_t S = 0, H = 0, G = 1, D = 0;  // G query heads per kv head
  bool causal = true;
  float scale = 1.0f;
  const uint16_t *q = nullptr, *k = nullptr, *v = nullptr, *o_in = nullptr, *dout = nullptr;
  int64_t ldq = 0, ldk = 0, ldv = 0, ldo = 0, lddo = 0;
  uint16_t *o = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  int64_t lddq = 0, lddk = 0, lddv = 0;
  float* lse = nullptr;  // forward writes, backward reads
  const float* delta = nullptr;
  bool wide = false;  // q, k, v and dout rows start on 16 bytes (Note [Flash tile loads])
  // The mask's key_start (backend/attn_mask.h), [B S] in device memory; null: none. Rows see
  // keys from key_start on; as it never decreases along a sequence, a tile's first row has the
  // least and its last row the most, which decide the tiles skipped and the masks skipped.
  const int32_t* key_start = nullptr;
};

// The first key of query row `row` of sequence b (0 without a key_start, never below 0), rows
// past the sequence's end taking its last row's.
MEMO_HD inline int64_t flash_key_start(const FlashArgs& f, int64_t b, int64_t row) {
  if (f.key_start == nullptr) return 0;
  const int32_t k = f.key_start[b * f.S + (row < f.S ? row : f.S - 1)];
  return k < 0 ? 0 : k;
}

// Whether every row the kernels load (q, k, v, dout; null ones aside) starts on 16 bytes.
inline bool flash_wide_loads(const FlashArgs& f) {
  const auto aligned = [](const uint16_t* p, int64_t ld) {
    return p == nullptr || (reinterpret_cast<uintptr_t>(p) % 16 == 0 && ld % 8 == 0);
  };
  return aligned(f.q, f.ldq) && aligned(f.k, f.ldk) && aligned(f.v, f.ldv) &&
         aligned(f.dout, f.lddo);
}

// 16 bytes of a row: eight bf16.
struct Quad {
  uint32_t w[4];
};
MEMO_HD inline Quad load_quad(const uint16_t* p, bool wide) {
  Quad q;
  if (wide) {
#if defined(__CUDA_ARCH__)
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    q.w[0] = v.x, q.w[1] = v.y, q.w[2] = v.z, q.w[3] = v.w;
#else
    std::memcpy(q.w, p, sizeof q.w);
#endif
  } else {
    for (int i = 0; i < 4; ++i) q.w[i] = load_pair(p + 2 * i);
  }
  return q;
}
MEMO_HD inline void store_quad(uint16_t* p, const Quad& q) {  // shared memory, 16-byte aligned
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint4*>(p) = make_uint4(q.w[0], q.w[1], q.w[2], q.w[3]);
#else
  std::memcpy(p, q.w, sizeof q.w);
#endif
}

// One thread's pieces of a tile (Note [Flash tile loads]).
template <int kD>
struct FlashPieces {
  static constexpr int kPerRow = kD / 8, kCount = kFlashRows * kPerRow / kFlashThreads;
  static_assert(kCount * kFlashThreads == kFlashRows * kPerRow, "whole pieces a thread");
  Quad p[kCount];
};

// Rows [r0, r0 + 64) of one head (columns c0.. c0 + D) of x into registers, zeros past row `rows`.
template <int kD, class Lane>
MEMO_HD void flash_fetch(Lane& th, FlashPieces<kD>& r, const uint16_t* x, int64_t ld, int64_t r0,
                         int64_t c0, int64_t rows, bool wide) {
  constexpr int kPerRow = FlashPieces<kD>::kPerRow;
  for (int i = 0; i < FlashPieces<kD>::kCount; ++i) {
    const int e = th.tid + i * kFlashThreads;
    const int64_t row = r0 + e / kPerRow;
    r.p[i] = row < rows ? load_quad(x + row * ld + c0 + 8 * (e % kPerRow), wide) : Quad{};
  }
}
// The pieces into a smem tile of pitch flash_pitch(kD).
template <int kD, class Lane>
MEMO_HD void flash_put(Lane& th, uint16_t* tile, const FlashPieces<kD>& r) {
  constexpr int kPerRow = FlashPieces<kD>::kPerRow, kP = flash_pitch(kD);
  for (int i = 0; i < FlashPieces<kD>::kCount; ++i) {
    const int e = th.tid + i * kFlashThreads;
    store_quad(tile + (e / kPerRow) * kP + 8 * (e % kPerRow), r.p[i]);
  }
}

// Copies rows [r0, r0 + 64) of one head (columns c0.. c0 + D) of x into a smem tile, zeros past
// row `rows`: fetched, then put.
template <int kD, class Lane>
MEMO_HD void flash_load_tile(Lane& th, uint16_t* tile, const uint16_t* x, int64_t ld, int64_t r0,
                             int64_t c0, int64_t rows, bool wide) {
  FlashPieces<kD> r;
  flash_fetch<kD>(th, r, x, ld, r0, c0, rows, wide);
  flash_put<kD>(th, tile, r);
}
// Two tiles' rows [r0, r0 + 64) (of x at c0 and of y at cy): all loads first, then all stores.
template <int kD, class Lane>
MEMO_HD void flash_load_tiles(Lane& th, uint16_t* tx, const uint16_t* x, int64_t ldx, int64_t cx,
                              uint16_t* ty, const uint16_t* y, int64_t ldy, int64_t cy, int64_t r0,
                              int64_t rows, bool wide) {
  FlashPieces<kD> a, b;
  flash_fetch<kD>(th, a, x, ldx, r0, cx, rows, wide);
  flash_fetch<kD>(th, b, y, ldy, r0, cy, rows, wide);
  flash_put<kD>(th, tx, a);
  flash_put<kD>(th, ty, b);
}

// acc[n] (n-tiles of 8 columns) += A B over k = 16 kk.. for the warp's 16 rows: A from a smem tile
// (rows a_row0.., columns k), B[k][n] = y[n][k] from a smem tile read along its rows (the other
// operand's rows as the product's columns): S = Q K^T, dP = dO V^T, S^T = K Q^T, dP^T = V dO^T.
template <int kD, int kN, class Lane>
MEMO_HD void flash_mma_rows_t(Lane& th, float (&acc)[kN][4], const uint16_t* a, int a_row0,
                              const uint16_t* y) {
  constexpr int kP = flash_pitch(kD);
  static_assert(kN % 2 == 0, "n-tiles come in pairs, one ldmatrix.x4 each");
  const int lane = th.tid % 32;
  for (int kk = 0; kk < kD / 16; ++kk) {
    // A: matrices (rows +0, +8) x (k +0, +8); lane l names row l % 16 at k + 8 (l / 16)
    uint32_t fa[4];
    th.ldmatrix_x4(fa, a + (a_row0 + lane % 16) * kP + 16 * kk + 8 * (lane / 16));
    for (int n = 0; n < kN; n += 2) {
      // B of n-tiles n and n + 1: matrices (tile n, n + 1) x (k +0, +8) of y's rows;
      // lane l names row 8 n + 8 (l / 16) + l % 8 at k + 8 ((l / 8) % 2)
      uint32_t fb[4];
      th.ldmatrix_x4(
          fb, y + (8 * n + 8 * (lane / 16) + lane % 8) * kP + 16 * kk + 8 * ((lane / 8) % 2));
      const uint32_t b0[2] = {fb[0], fb[1]}, b1[2] = {fb[2], fb[3]};
      th.mma(acc[n], fa, b0);
      th.mma(acc[n + 1], fa, b1);
    }
  }
}

// acc[dn] (n-tiles over the D columns) += X Y where X (16 x 64, this warp's rows) is in registers
// as C fragments x[8][4] (rounded to bf16 here: the A fragments of k = 16 kk are the C fragments
// of n-tiles 2 kk and 2 kk + 1) and Y [64][D] is a smem tile: O += P V, dQ += dS K, dV += P^T dO,
// dK += dS^T Q.
template <int kD, class Lane>
MEMO_HD void flash_mma_regs(Lane& th, float (&acc)[kD / 8][4], const float (&x)[8][4],
                            const uint16_t* y) {
  constexpr int kP = flash_pitch(kD);
  static_assert((kD / 8) % 2 == 0, "n-tiles come in pairs, one ldmatrix.x4.trans each");
  const int lane = th.tid % 32;
  for (int kk = 0; kk < 4; ++kk) {
    const float(&l)[4] = x[2 * kk];
    const float(&h)[4] = x[2 * kk + 1];
    const uint32_t fa[4] = {pack_bf16(l[0], l[1]), pack_bf16(l[2], l[3]), pack_bf16(h[0], h[1]),
                            pack_bf16(h[2], h[3])};
    // B[k][n] = Y[16 kk + k][8 dn + n], transposed on the way in: matrices (k +0, +8) x (n-tiles
    // dn, dn + 1); lane l names Y's row 16 kk + l % 16 at column 8 (dn + l / 16)
    const uint16_t* row = y + (16 * kk + lane % 16) * kP + 8 * (lane / 16);
    for (int dn = 0; dn < kD / 8; dn += 2) {
      uint32_t fb[4];
      th.ldmatrix_x4_trans(fb, row + 8 * dn);
      const uint32_t b0[2] = {fb[0], fb[1]}, b1[2] = {fb[2], fb[3]};
      th.mma(acc[dn], fa, b0);
      th.mma(acc[dn + 1], fa, b1);
    }
  }
}

// Writes a warp's 16 x D accumulator rows (row0 + g, + 8 of the tile starting at r0) times `mul`,
// rounded to bf16, rows below `rows` only.
template <int kD, class Lane>
MEMO_HD void flash_store_rows(Lane& th, uint16_t* x, int64_t ld, int64_t r0, int64_t c0,
                              const float (&acc)[kD / 8][4], const float (&mul)[2], int64_t rows) {
  const int lane = th.tid % 32, g = lane / 4, t = lane % 4, row0 = (th.tid / 32) * 16;
  for (int half = 0; half < 2; ++half) {
    const int64_t row = r0 + row0 + g + 8 * half;
    if (row >= rows) continue;
    for (int dn = 0; dn < kD / 8; ++dn)
      store_pair(x + row * ld + c0 + 8 * dn + 2 * t,
                 pack_bf16(acc[dn][2 * half] * mul[half], acc[dn][2 * half + 1] * mul[half]));
  }
}

// The forward of query rows [q0, q0 + 64) of head h of sequence b.
template <int kD, class Lane>
MEMO_HD void flash_forward_block(Lane& th, const FlashArgs& f, int64_t b, int64_t h, int64_t q0) {
  constexpr int kP = flash_pitch(kD);
  uint16_t* sq = static_cast<uint16_t*>(th.smem);
  uint16_t* sk = sq + kFlashRows * kP;
  uint16_t* sv = sk + kFlashRows * kP;
  const int warp = th.tid / 32, lane = th.tid % 32, g = lane / 4, t = lane % 4;
  const int64_t S = f.S, base = b * S, hk = h / f.G;
  flash_load_tile<kD>(th, sq, f.q + base * f.ldq, f.ldq, q0, h * kD, S, f.wide);
  float o[kD / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int64_t kend = f.causal ? (q0 + kFlashRows < S ? q0 + kFlashRows : S) : S;
  // key_start: the tiles before the block's first row's first key hold nothing it sees
  const int64_t ks[2] = {flash_key_start(f, b, q0 + warp * 16 + g),
                         flash_key_start(f, b, q0 + warp * 16 + g + 8)};
  const int64_t warp_ks = flash_key_start(f, b, q0 + warp * 16 + 15);
  for (int64_t j0 = flash_key_start(f, b, q0) / kFlashCols * kFlashCols; j0 < kend;
       j0 += kFlashCols) {
    th.sync();  // the previous tile's readers are done
    flash_load_tiles<kD>(th, sk, f.k + base * f.ldk, f.ldk, hk * kD, sv, f.v + base * f.ldv, f.ldv,
                         hk * kD, j0, S, f.wide);
    th.sync();
    // every key of the tile visible to every row of this warp: no mask to apply
    const bool open = j0 + kFlashCols <= S && j0 >= warp_ks &&
                      (!f.causal || j0 + kFlashCols - 1 <= q0 + warp * 16);
    float s[8][4] = {};
    flash_mma_rows_t<kD>(th, s, sq, warp * 16, sk);
    float mt[2] = {-INFINITY, -INFINITY};
    for (int n = 0; n < 8; ++n)
      for (int i = 0; i < 4; ++i) {
        const int64_t row = q0 + warp * 16 + g + 8 * (i / 2), col = j0 + 8 * n + 2 * t + i % 2;
        const bool visible = open || (col < S && (!f.causal || col <= row) && col >= ks[i / 2]);
        s[n][i] = visible ? s[n][i] * f.scale : -INFINITY;
        mt[i / 2] = s[n][i] > mt[i / 2] ? s[n][i] : mt[i / 2];
      }
    float corr[2], mu[2];
    for (int r = 0; r < 2; ++r) {
      for (int x = 1; x < 4; x *= 2) {  // the row's 4 lanes
        const float other = th.shfl_xor(mt[r], x);
        mt[r] = other > mt[r] ? other : mt[r];
      }
      const float mn = mt[r] > m[r] ? mt[r] : m[r];
      mu[r] = mn == -INFINITY ? 0.0f : mn;  // a row with nothing visible yet keeps 0 weight
      corr[r] = m[r] == -INFINITY ? 0.0f : expf(m[r] - mu[r]);
      m[r] = mn;
      l[r] *= corr[r];
    }
    for (int n = 0; n < 8; ++n)
      for (int i = 0; i < 4; ++i) {
        s[n][i] = s[n][i] == -INFINITY ? 0.0f : expf(s[n][i] - mu[i / 2]);
        l[i / 2] += s[n][i];
      }
    for (int dn = 0; dn < kD / 8; ++dn)
      for (int i = 0; i < 4; ++i) o[dn][i] *= corr[i / 2];
    flash_mma_regs<kD>(th, o, s, sv);
  }
  float inv[2];
  for (int r = 0; r < 2; ++r) {
    for (int x = 1; x < 4; x *= 2) l[r] += th.shfl_xor(l[r], x);  // the same sum on all 4 lanes
    inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
  }
  flash_store_rows<kD>(th, f.o + base * f.ldo, f.ldo, q0, h * kD, o, inv, S);
  if (t == 0)
    for (int r = 0; r < 2; ++r) {
      const int64_t row = q0 + warp * 16 + g + 8 * r;
      if (row < S) f.lse[(b * f.H + h) * S + row] = m[r] + logf(l[r]);
    }
}

// dQ of query rows [q0, q0 + 64) of head h of sequence b (f.delta: sequence b's [H, S]).
template <int kD, class Lane>
MEMO_HD void flash_dq_block(Lane& th, const FlashArgs& f, int64_t b, int64_t h, int64_t q0) {
  constexpr int kP = flash_pitch(kD);
  uint16_t* sq = static_cast<uint16_t*>(th.smem);
  uint16_t* sdo = sq + kFlashRows * kP;
  uint16_t* sk = sdo + kFlashRows * kP;
  uint16_t* sv = sk + kFlashRows * kP;
  const int warp = th.tid / 32, lane = th.tid % 32, g = lane / 4, t = lane % 4;
  const int64_t S = f.S, base = b * S, hk = h / f.G;
  flash_load_tiles<kD>(th, sq, f.q + base * f.ldq, f.ldq, h * kD, sdo, f.dout + base * f.lddo,
                       f.lddo, h * kD, q0, S, f.wide);
  float lse[2], delta[2];
  for (int r = 0; r < 2; ++r) {
    const int64_t row = q0 + warp * 16 + g + 8 * r;
    lse[r] = row < S ? f.lse[(b * f.H + h) * S + row] : 0.0f;
    delta[r] = row < S ? f.delta[h * S + row] : 0.0f;
  }
  float dq[kD / 8][4] = {};
  const int64_t kend = f.causal ? (q0 + kFlashRows < S ? q0 + kFlashRows : S) : S;
  const int64_t ks[2] = {flash_key_start(f, b, q0 + warp * 16 + g),
                         flash_key_start(f, b, q0 + warp * 16 + g + 8)};
  const int64_t warp_ks = flash_key_start(f, b, q0 + warp * 16 + 15);
  for (int64_t j0 = flash_key_start(f, b, q0) / kFlashCols * kFlashCols; j0 < kend;
       j0 += kFlashCols) {
    th.sync();
    flash_load_tiles<kD>(th, sk, f.k + base * f.ldk, f.ldk, hk * kD, sv, f.v + base * f.ldv, f.ldv,
                         hk * kD, j0, S, f.wide);
    th.sync();
    const bool open = q0 + warp * 16 + 16 <= S && j0 + kFlashCols <= S && j0 >= warp_ks &&
                      (!f.causal || j0 + kFlashCols - 1 <= q0 + warp * 16);
    float s[8][4] = {}, dp[8][4] = {};
    flash_mma_rows_t<kD>(th, s, sq, warp * 16, sk);
    flash_mma_rows_t<kD>(th, dp, sdo, warp * 16, sv);
    for (int n = 0; n < 8; ++n)
      for (int i = 0; i < 4; ++i) {
        const int64_t row = q0 + warp * 16 + g + 8 * (i / 2), col = j0 + 8 * n + 2 * t + i % 2;
        const bool visible =
            open || (row < S && col < S && (!f.causal || col <= row) && col >= ks[i / 2]);
        const float p = visible ? expf(s[n][i] * f.scale - lse[i / 2]) : 0.0f;
        s[n][i] = p * (dp[n][i] - delta[i / 2]);  // dS
      }
    flash_mma_regs<kD>(th, dq, s, sk);
  }
  const float mul[2] = {f.scale, f.scale};
  flash_store_rows<kD>(th, f.dq + base * f.lddq, f.lddq, q0, h * kD, dq, mul, S);
}

// dK and dV of keys [k0, k0 + 64) of kv head hk of sequence b, over its G query heads.
template <int kD, class Lane>
MEMO_HD void flash_dkdv_block(Lane& th, const FlashArgs& f, int64_t b, int64_t hk, int64_t k0) {
  constexpr int kP = flash_pitch(kD);
  uint16_t* sk = static_cast<uint16_t*>(th.smem);
  uint16_t* sv = sk + kFlashRows * kP;
  uint16_t* sq = sv + kFlashRows * kP;
  uint16_t* sdo = sq + kFlashRows * kP;
  float* slse = reinterpret_cast<float*>(sdo + kFlashRows * kP);
  float* sdelta = slse + kFlashCols;
  int32_t* sks = reinterpret_cast<int32_t*>(sdelta + kFlashCols);  // the query rows' key_start
  const int warp = th.tid / 32, lane = th.tid % 32, g = lane / 4, t = lane % 4;
  const int64_t S = f.S, base = b * S;
  const int64_t i_start = f.causal ? k0 : 0;  // tiles of 64 on both sides: k0 is a tile start
  flash_load_tiles<kD>(th, sk, f.k + base * f.ldk, f.ldk, hk * kD, sv, f.v + base * f.ldv, f.ldv,
                       hk * kD, k0, S, f.wide);
  float dk[kD / 8][4] = {}, dv[kD / 8][4] = {};
  for (int64_t hh = 0; hh < f.G; ++hh) {
    const int64_t h = hk * f.G + hh;
    for (int64_t i0 = i_start; i0 < S; i0 += kFlashCols) {
      // key_start: this query tile's rows and every later one's see none of these keys
      if (flash_key_start(f, b, i0) >= k0 + kFlashRows) break;
      th.sync();
      flash_load_tiles<kD>(th, sq, f.q + base * f.ldq, f.ldq, h * kD, sdo, f.dout + base * f.lddo,
                           f.lddo, h * kD, i0, S, f.wide);
      for (int e = th.tid; e < kFlashCols; e += kFlashThreads) {
        const int64_t row = i0 + e;
        slse[e] = row < S ? f.lse[(b * f.H + h) * S + row] : 0.0f;
        sdelta[e] = row < S ? f.delta[h * S + row] : 0.0f;
        sks[e] = int32_t(flash_key_start(f, b, row));
      }
      th.sync();
      const bool open = k0 + warp * 16 + 16 <= S && i0 + kFlashCols <= S &&
                        k0 + warp * 16 >= flash_key_start(f, b, i0 + kFlashCols - 1) &&
                        (!f.causal || k0 + warp * 16 + 15 <= i0);
      float st[8][4] = {}, dpt[8][4] = {};
      flash_mma_rows_t<kD>(th, st, sk, warp * 16, sq);    // S^T = K Q^T
      flash_mma_rows_t<kD>(th, dpt, sv, warp * 16, sdo);  // dP^T = V dO^T
      float pt[8][4];
      for (int n = 0; n < 8; ++n)
        for (int i = 0; i < 4; ++i) {
          const int c = 8 * n + 2 * t + i % 2;
          const int64_t key = k0 + warp * 16 + g + 8 * (i / 2), row = i0 + c;
          const bool visible =
              open || (row < S && key < S && (!f.causal || key <= row) && key >= sks[c]);
          pt[n][i] = visible ? expf(st[n][i] * f.scale - slse[c]) : 0.0f;
          st[n][i] = pt[n][i] * (dpt[n][i] - sdelta[c]);  // dS^T
        }
      flash_mma_regs<kD>(th, dv, pt, sdo);
      flash_mma_regs<kD>(th, dk, st, sq);
    }
  }
  const float one[2] = {1.0f, 1.0f}, mul[2] = {f.scale, f.scale};
  flash_store_rows<kD>(th, f.dk + base * f.lddk, f.lddk, k0, hk * kD, dk, mul, S);
  flash_store_rows<kD>(th, f.dv + base * f.lddv, f.lddv, k0, hk * kD, dv, one, S);
}

}  // namespace memo::cuda
