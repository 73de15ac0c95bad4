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
// instructions (cuda/attention.cu); the tests run a block on 128 CPU threads with barriers, a
// product that rebuilds the matrices from every lane's
// fragments by the PTX ISA's layout (mma_*_row/col below), so the kernels' logic, tiling and
// fragment bookkeeping are checked on machines without a GPU (tests/cuda/flash_attention_test.cc).
// Fragments come from shared memory by ldmatrix (.x4, and .trans where the operand is read down its
// columns: V in P V, K in dS K, dO and Q in the dK/dV products); tiles reach shared memory by
// plain 32-bit loads (no cp.async, no double buffering yet). The emulation of ldmatrix follows
// the PTX ISA's distribution (thread l receives row l / 4, elements 2 (l % 4) and + 1, of each
// 8 x 8 matrix, or of its transpose) and checks that every row address is 16-byte aligned.
//
// Head dims 32, 64 and 128 (flash_head_dim); others, f32 activations, and unaligned tensors take
// the chunked schedule (Note [Chunked attention]). NOT YET RUN ON A GPU.
#pragma once

#include <cmath>
#include <cstdint>

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
constexpr int flash_backward_smem(int d) {
  return 4 * kFlashRows * flash_pitch(d) * 2 + 2 * kFlashCols * 4;
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
};

// Copies rows [r0, r0 + 64) of one head (columns c0.. c0 + D) of x into a smem tile, zeros past
// row `rows`. Every thread of the block takes pairs.
template <int kD, class Lane>
MEMO_HD void flash_load_tile(Lane& th, uint16_t* tile, const uint16_t* x, int64_t ld, int64_t r0,
                             int64_t c0, int64_t rows) {
  constexpr int kPairs = kD / 2, kP = flash_pitch(kD);
  for (int e = th.tid; e < kFlashRows * kPairs; e += kFlashThreads) {
    const int r = e / kPairs, c = 2 * (e % kPairs);
    const int64_t row = r0 + r;
    store_pair(tile + r * kP + c, row < rows ? load_pair(x + row * ld + c0 + c) : 0u);
  }
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
  flash_load_tile<kD>(th, sq, f.q + base * f.ldq, f.ldq, q0, h * kD, S);
  float o[kD / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int64_t kend = f.causal ? (q0 + kFlashRows < S ? q0 + kFlashRows : S) : S;
  for (int64_t j0 = 0; j0 < kend; j0 += kFlashCols) {
    th.sync();  // the previous tile's readers are done
    flash_load_tile<kD>(th, sk, f.k + base * f.ldk, f.ldk, j0, hk * kD, S);
    flash_load_tile<kD>(th, sv, f.v + base * f.ldv, f.ldv, j0, hk * kD, S);
    th.sync();
    float s[8][4] = {};
    flash_mma_rows_t<kD>(th, s, sq, warp * 16, sk);
    float mt[2] = {-INFINITY, -INFINITY};
    for (int n = 0; n < 8; ++n)
      for (int i = 0; i < 4; ++i) {
        const int64_t row = q0 + warp * 16 + g + 8 * (i / 2), col = j0 + 8 * n + 2 * t + i % 2;
        const bool visible = col < S && (!f.causal || col <= row);
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
  flash_load_tile<kD>(th, sq, f.q + base * f.ldq, f.ldq, q0, h * kD, S);
  flash_load_tile<kD>(th, sdo, f.dout + base * f.lddo, f.lddo, q0, h * kD, S);
  float lse[2], delta[2];
  for (int r = 0; r < 2; ++r) {
    const int64_t row = q0 + warp * 16 + g + 8 * r;
    lse[r] = row < S ? f.lse[(b * f.H + h) * S + row] : 0.0f;
    delta[r] = row < S ? f.delta[h * S + row] : 0.0f;
  }
  float dq[kD / 8][4] = {};
  const int64_t kend = f.causal ? (q0 + kFlashRows < S ? q0 + kFlashRows : S) : S;
  for (int64_t j0 = 0; j0 < kend; j0 += kFlashCols) {
    th.sync();
    flash_load_tile<kD>(th, sk, f.k + base * f.ldk, f.ldk, j0, hk * kD, S);
    flash_load_tile<kD>(th, sv, f.v + base * f.ldv, f.ldv, j0, hk * kD, S);
    th.sync();
    float s[8][4] = {}, dp[8][4] = {};
    flash_mma_rows_t<kD>(th, s, sq, warp * 16, sk);
    flash_mma_rows_t<kD>(th, dp, sdo, warp * 16, sv);
    for (int n = 0; n < 8; ++n)
      for (int i = 0; i < 4; ++i) {
        const int64_t row = q0 + warp * 16 + g + 8 * (i / 2), col = j0 + 8 * n + 2 * t + i % 2;
        const bool visible = row < S && col < S && (!f.causal || col <= row);
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
  const int warp = th.tid / 32, lane = th.tid % 32, g = lane / 4, t = lane % 4;
  const int64_t S = f.S, base = b * S;
  flash_load_tile<kD>(th, sk, f.k + base * f.ldk, f.ldk, k0, hk * kD, S);
  flash_load_tile<kD>(th, sv, f.v + base * f.ldv, f.ldv, k0, hk * kD, S);
  float dk[kD / 8][4] = {}, dv[kD / 8][4] = {};
  const int64_t i_start = f.causal ? k0 : 0;  // tiles of 64 on both sides: k0 is a tile start
  for (int64_t hh = 0; hh < f.G; ++hh) {
    const int64_t h = hk * f.G + hh;
    for (int64_t i0 = i_start; i0 < S; i0 += kFlashCols) {
      th.sync();
      flash_load_tile<kD>(th, sq, f.q + base * f.ldq, f.ldq, i0, h * kD, S);
      flash_load_tile<kD>(th, sdo, f.dout + base * f.lddo, f.lddo, i0, h * kD, S);
      for (int e = th.tid; e < kFlashCols; e += kFlashThreads) {
        const int64_t row = i0 + e;
        slse[e] = row < S ? f.lse[(b * f.H + h) * S + row] : 0.0f;
        sdelta[e] = row < S ? f.delta[h * S + row] : 0.0f;
      }
      th.sync();
      float st[8][4] = {}, dpt[8][4] = {};
      flash_mma_rows_t<kD>(th, st, sk, warp * 16, sq);    // S^T = K Q^T
      flash_mma_rows_t<kD>(th, dpt, sv, warp * 16, sdo);  // dP^T = V dO^T
      float pt[8][4];
      for (int n = 0; n < 8; ++n)
        for (int i = 0; i < 4; ++i) {
          const int c = 8 * n + 2 * t + i % 2;
          const int64_t key = k0 + warp * 16 + g + 8 * (i / 2), row = i0 + c;
          const bool visible = row < S && key < S && (!f.causal || key <= row);
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
