// Causal (or full) grouped-query attention as strided-batched matrix products over chunks of
// query rows, with small kernels between them: CUDA's attention (cuda_backend.cu runs the
// products on cuBLASLt), written once as templates over the operations so that
// tests/cuda/chunked_attention_test.cc runs the same schedule on the CPU against the CPU kernels.
//
// Note [Chunked attention]
// The first step towards a fused kernel: the score matrix is never held whole, only the
// scores of one chunk of `rows` query rows against the keys they can see, for every head at once
// ([H, rows, keys] floats of scratch, so the memory grows as seq x heads, not seq^2). Per chunk
// [i0, i0 + n) of one sequence, with keys [0, kend) (kend = i0 + n under the causal mask, S under
// the full one) and G = H / Hkv query heads per key/value head:
//   forward:  S_h = scale Q_h K_g^T                        (G products, each batched over Hkv)
//             P_h = softmax of each row over its visible keys, 0 beyond; lse = m + log l
//             O_h = P_h V_g                                 (G products)
//   backward: S_h as above; dP_h = dO_h V_g^T              (2 G products)
//             P = exp(S - lse) (0 where masked); dS = P (dP - delta), delta = rowsum(dO . O)
//             dQ_h  = scale dS_h K_g                        (G products)
//             dK_g += scale dS_h^T Q_h,  dV_g += P_h^T dO_h (2 G products, accumulated)
// Head h = g G + j: for a fixed j the heads g G + j sit G D columns apart in q and o and their
// key/value heads D apart in k and v, so each product is one strided batch over the Hkv groups.
// dK and dV are zeroed first and accumulate chunk by chunk, j by j, on one stream: a fixed order
// and no atomics, so the backward is deterministic. The causal chunk computes its whole
// [n, kend) block and zeroes the masked corner: at most n / 2 wasted columns a row.
// The softmax reduces each row in kSoftmaxLanes lanes (lane l takes columns l, l + lanes, ...,
// with the online max and sum), then combines the lanes in a fixed pairwise tree: the GPU kernel
// runs one block a row, a thread a lane, and the tree in shared memory; the CPU test runs the
// same lanes and tree in loops.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "memo/cuda/bodies.h"

namespace memo::cuda {

// Row-major strided-batched product: for every i < batch,
//   C_i[m, n] = alpha op(A_i) op(B_i) + beta C_i, X_i = X + i stride_x (floats; ld: row stride).
// op(A) is [m, k] (A stored [k, m] when trans_a), op(B) is [k, n] (B stored [n, k] when trans_b).
struct RowGemm {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const float* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const float* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  float* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
};

inline constexpr int64_t kChunkAlign = 16;  // score rows start 64 bytes apart
// The backward's two score buffers stay within this many floats (1 GiB) where chunks of
// kChunkAlign rows allow it.
inline constexpr int64_t kChunkScoreFloats = int64_t(1) << 28;
inline constexpr int kSoftmaxLanes = 256;  // threads of the softmax kernel's block

inline int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// One call's shape: B sequences of S rows, H query heads over Hkv key/value heads of width D,
// chunks of `rows` query rows.
struct ChunkShape {
  int64_t B = 0, S = 0, H = 0, Hkv = 0, D = 0;
  bool causal = true;
  int64_t rows = 0;
  int64_t G() const { return H / Hkv; }
  int64_t scores_numel() const { return H * rows * round_up(S, kChunkAlign); }
};

// The chunk height for S rows and H heads: as many rows (a multiple of kChunkAlign) as keep the
// backward's two [H, rows, S] buffers within kChunkScoreFloats, at least kChunkAlign, at most S.
inline int64_t chunk_rows(int64_t S, int64_t H) {
  const int64_t per_row = 2 * H * round_up(S, kChunkAlign);
  const int64_t fit =
      std::max(kChunkAlign, kChunkScoreFloats / per_row / kChunkAlign * kChunkAlign);
  return std::min(fit, round_up(S, kChunkAlign));
}
inline ChunkShape chunk_shape(int64_t B, int64_t S, int64_t H, int64_t Hkv, int64_t D,
                              bool causal) {
  return ChunkShape{B, S, H, Hkv, D, causal, chunk_rows(S, H)};
}
// Scratch floats: the forward's scores; the backward's scores, their gradient and delta.
inline int64_t chunked_forward_scratch_numel(const ChunkShape& c) { return c.scores_numel(); }
inline int64_t chunked_backward_scratch_numel(const ChunkShape& c) {
  return 2 * c.scores_numel() + c.H * c.S;
}

// One chunk's score rows: [H, n, ld] floats, row (h, r) is query i0 + r of head h over keys
// [0, kend); under the causal mask it sees keys 0 .. i0 + r.
struct ScoreRows {
  float* s = nullptr;
  int64_t n = 0, ld = 0, kend = 0, i0 = 0;
  bool causal = true;
  MEMO_HD float* row(int64_t h, int64_t r) const { return s + (h * n + r) * ld; }
  MEMO_HD int64_t visible(int64_t r) const { return causal ? i0 + r + 1 : kend; }
};

// --- the softmax of one row: lanes, then a fixed tree ---
// Lane `lane`'s running max m and sum l of exp(s - m) over columns lane, lane + lanes, ... < n.
MEMO_HD inline void softmax_lane(const float* s, int64_t n, int lane, int lanes, float& m,
                                 float& l) {
  m = -INFINITY;
  l = 0.0f;
  for (int64_t t = lane; t < n; t += lanes) {
    const float x = s[t];
    if (x > m) {
      l = l * exp_f(m - x) + 1.0f;
      m = x;
    } else {
      l += exp_f(x - m);
    }
  }
}
// (m, l) <- the pair over both lanes' columns; an empty lane (m = -inf) changes nothing.
MEMO_HD inline void softmax_combine(float& m, float& l, float m2, float l2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2;
    l = l2;
    return;
  }
  const float mx = m > m2 ? m : m2;
  l = l * exp_f(m - mx) + l2 * exp_f(m2 - mx);
  m = mx;
}
// One step of the tree over `lanes` pairs (a power of two): lane < half takes lane + half's.
MEMO_HD inline void softmax_tree_step(float* m, float* l, int lane, int half) {
  softmax_combine(m[lane], l[lane], m[lane + half], l[lane + half]);
}
// Column t of the row once (m, l) is known: the probability, 0 beyond the visible keys.
MEMO_HD inline float softmax_prob(float s, int64_t t, int64_t visible, float m, float l) {
  return t < visible ? exp_f(s - m) / l : 0.0f;
}

// --- the backward's scores to probabilities and their gradient, one element ---
// p = exp(s - lse) where visible, else 0; ds = p (dp - delta). In place: s <- p, dp <- ds.
MEMO_HD inline void grad_scores_item(const ScoreRows& sc, float* dp_base, const float* lse,
                                     const float* delta, int64_t S, int64_t h, int64_t r,
                                     int64_t t) {
  float* s = sc.row(h, r) + t;
  float* dp = dp_base + (s - sc.s);
  const int64_t i = sc.i0 + r;
  const float p = t < sc.visible(r) ? exp_f(*s - lse[h * S + i]) : 0.0f;
  *s = p;
  *dp = p * (*dp - delta[h * S + i]);
}

// --- the schedule ---
// Ops provides: gemm(const RowGemm&); softmax(const ScoreRows&, float* lse_b) (lse_b: [H, S] of
// this sequence; every row of sc to probabilities, lse of each); zero(Mat); delta(float* delta,
// CMat dout, CMat o, int64_t b, ...) = rowsum(dO . O) of sequence b into [H, S]; grad_scores(
// const ScoreRows&, float* dp, const float* lse_b, const float* delta) (grad_scores_item over
// every head, row and column t < kend).

// The G products of one chunk for j = 0 .. G-1: X_h [n, *] rows of x at column h D (h = g G + j).
inline const float* head_rows(const CMat& x, int64_t row, int64_t col) {
  return x.p + row * x.ld + col;
}

template <class Ops>
void chunked_attention_forward(Ops& ops, const ChunkShape& c, Mat o, float* lse, CMat q, CMat k,
                               CMat v, float* scores) {
  const int64_t S = c.S, D = c.D, G = c.G();
  const float scale = 1.0f / std::sqrt(float(D));
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t i0 = 0; i0 < S; i0 += c.rows) {
      const int64_t n = std::min(c.rows, S - i0), kend = c.causal ? i0 + n : S;
      const ScoreRows sc{scores, n, round_up(kend, kChunkAlign), kend, i0, c.causal};
      const int64_t head_block = n * sc.ld;  // one head's scores
      for (int64_t j = 0; j < G; ++j) {
        RowGemm g;
        g.trans_b = true;
        g.m = n, g.n = kend, g.k = D, g.alpha = scale;
        g.a = head_rows(q, b * S + i0, j * D), g.lda = q.ld, g.stride_a = G * D;
        g.b = head_rows(k, b * S, 0), g.ldb = k.ld, g.stride_b = D;
        g.c = scores + j * head_block, g.ldc = sc.ld, g.stride_c = G * head_block;
        g.batch = c.Hkv;
        ops.gemm(g);
      }
      ops.softmax(sc, lse + b * c.H * S);
      for (int64_t j = 0; j < G; ++j) {
        RowGemm g;
        g.m = n, g.n = D, g.k = kend;
        g.a = scores + j * head_block, g.lda = sc.ld, g.stride_a = G * head_block;
        g.b = head_rows(v, b * S, 0), g.ldb = v.ld, g.stride_b = D;
        g.c = o.p + (b * S + i0) * o.ld + j * D, g.ldc = o.ld, g.stride_c = G * D;
        g.batch = c.Hkv;
        ops.gemm(g);
      }
    }
  }
}

template <class Ops>
void chunked_attention_backward(Ops& ops, const ChunkShape& c, Mat dq, Mat dk, Mat dv, CMat dout,
                                CMat q, CMat k, CMat v, CMat o, const float* lse, float* scratch) {
  const int64_t S = c.S, D = c.D, G = c.G();
  const float scale = 1.0f / std::sqrt(float(D));
  float* scores = scratch;
  float* dscores = scratch + c.scores_numel();
  float* delta = dscores + c.scores_numel();
  ops.zero(dk);
  ops.zero(dv);
  for (int64_t b = 0; b < c.B; ++b) {
    ops.delta(delta, dout, o, b);
    const float* lse_b = lse + b * c.H * S;
    for (int64_t i0 = 0; i0 < S; i0 += c.rows) {
      const int64_t n = std::min(c.rows, S - i0), kend = c.causal ? i0 + n : S;
      const ScoreRows sc{scores, n, round_up(kend, kChunkAlign), kend, i0, c.causal};
      const int64_t head_block = n * sc.ld;
      for (int64_t j = 0; j < G; ++j) {
        RowGemm g;  // S_h = scale Q_h K_g^T, dP_h = dO_h V_g^T
        g.trans_b = true;
        g.m = n, g.n = kend, g.k = D, g.alpha = scale;
        g.a = head_rows(q, b * S + i0, j * D), g.lda = q.ld, g.stride_a = G * D;
        g.b = head_rows(k, b * S, 0), g.ldb = k.ld, g.stride_b = D;
        g.c = scores + j * head_block, g.ldc = sc.ld, g.stride_c = G * head_block;
        g.batch = c.Hkv;
        ops.gemm(g);
        g.alpha = 1.0f;
        g.a = head_rows(dout, b * S + i0, j * D), g.lda = dout.ld;
        g.b = head_rows(v, b * S, 0), g.ldb = v.ld;
        g.c = dscores + j * head_block;
        ops.gemm(g);
      }
      ops.grad_scores(sc, dscores, lse_b, delta);
      for (int64_t j = 0; j < G; ++j) {
        RowGemm g;  // dQ_h = scale dS_h K_g
        g.m = n, g.n = D, g.k = kend, g.alpha = scale;
        g.a = dscores + j * head_block, g.lda = sc.ld, g.stride_a = G * head_block;
        g.b = head_rows(k, b * S, 0), g.ldb = k.ld, g.stride_b = D;
        g.c = dq.p + (b * S + i0) * dq.ld + j * D, g.ldc = dq.ld, g.stride_c = G * D;
        g.batch = c.Hkv;
        ops.gemm(g);
        RowGemm t;  // dK_g += scale dS_h^T Q_h, dV_g += P_h^T dO_h
        t.trans_a = true;
        t.m = kend, t.n = D, t.k = n, t.alpha = scale, t.beta = 1.0f;
        t.a = dscores + j * head_block, t.lda = sc.ld, t.stride_a = G * head_block;
        t.b = head_rows(q, b * S + i0, j * D), t.ldb = q.ld, t.stride_b = G * D;
        t.c = dk.p + b * S * dk.ld, t.ldc = dk.ld, t.stride_c = D;
        t.batch = c.Hkv;
        ops.gemm(t);
        t.alpha = 1.0f;
        t.a = scores + j * head_block;
        t.b = head_rows(dout, b * S + i0, j * D), t.ldb = dout.ld;
        t.c = dv.p + b * S * dv.ld, t.ldc = dv.ld;
        ops.gemm(t);
      }
    }
  }
}

}  // namespace memo::cuda
