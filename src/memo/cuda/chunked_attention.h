// Causal (or full) grouped-query attention as strided-batched matrix products over chunks of
// query rows, with small kernels between them: CUDA's attention (cuda/attention.cu runs the
// products on cuBLASLt), written once as templates over the operations so that
// tests/cuda/bodies_test.cc runs the same schedule on the CPU against the CPU kernels.
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
// A mask's key_start (document masks, sliding windows) zeroes the columns before each row's first
// key too, and a chunk's products skip the keys before the kChunkAlign-row block that holds its
// first row's first key (the least of its rows', as key_start never decreases): each chunk of a
// sequence computes keys [k0, kend) only, column t of its scores being key k0 + t, so the cost
// follows the documents' lengths, not the window's. k0 is decided on the host, from the mask's
// host copy (ChunkShape::key_start_host), before the products are launched. A chunk whose rows
// see no key at all (a full mask's key_start past the keys) keeps one block of masked columns,
// so its rows still get o = 0 and lse = -inf. The skipped products add only exact zeros in f32
// arithmetic (P and dS are 0 there), so the results are those of the unskipped schedule up to
// the products' own summation order (not yet run on a GPU).
// bf16 (a mixed-precision run's activations, Note [bf16 storage by conversion]): q, k, v, o, dout
// and dq, dk, dv are bf16, the products take bf16 operands on the tensor cores and accumulate in
// f32 (cuBLASLt), the scores, lse and delta stay f32, and the probabilities P and their gradient
// dS are rounded to bf16 once before they enter a product (FlashAttention-2 does the same); dK
// and dV accumulate over the chunks in f32 scratch and are rounded once a sequence. The
// storage reference (the f32 kernels over widened inputs) keeps P and dS in f32: the two agree
// within a few bf16 roundings (the tolerance is derived in tests/cuda/bodies_test.cc).
// The softmax reduces each row in kSoftmaxLanes lanes (lane l takes columns l, l + lanes, ...,
// with the online max and sum), then combines the lanes in a fixed pairwise tree: the GPU kernel
// runs one block a row, a thread a lane, and the tree in shared memory; the CPU test runs the
// same lanes and tree in loops.
// Cost: every score makes about four trips through memory (written by the product, read and
// rewritten by the softmax, read by the next product; more in the backward), so long sequences
// are bound by memory bandwidth, not by the tensor cores: a fused kernel keeps the scores on
// chip. The chunk height is the budget's (kChunkScoreBytes; at 32K tokens and 32 heads, 80 rows);
// set_cuda_attention_chunk_rows forces another (tests).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "memo/cuda/bodies.h"

namespace memo::cuda {

// Row-major strided-batched product: for every i < batch,
//   C_i[m, n] = alpha op(A_i) op(B_i) + beta C_i, X_i = X + i stride_x elements (ld: row stride).
// op(A) is [m, k] (A stored [k, m] when trans_a), op(B) is [k, n] (B stored [n, k] when trans_b).
// A and B are bf16 where ab_bf16, else f32; C is bf16 where c_bf16 (rounded once), else f32;
// accumulation is f32.
struct RowGemm {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
  bool ab_bf16 = false, c_bf16 = false;
};

inline constexpr int64_t kChunkAlign = 16;  // score rows start 32 (bf16) or 64 bytes apart
// The backward's score buffers (f32 scores and their gradient, bf16 P and dS: 12 bytes an
// element) stay within this many bytes where chunks of kChunkAlign rows allow it.
inline constexpr int64_t kChunkScoreBytes = int64_t(1) << 30;
inline constexpr int kSoftmaxLanes = 256;  // threads of the softmax kernel's block

inline int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// One call's shape: B sequences of S rows, H query heads over Hkv key/value heads of width D,
// chunks of `rows` query rows.
struct ChunkShape {
  int64_t B = 0, S = 0, H = 0, Hkv = 0, D = 0;
  bool causal = true;
  int64_t rows = 0;
  // The mask's key_start (backend/attn_mask.h), [B S] in the memory the kernels read; null: none.
  const int32_t* key_start = nullptr;
  // The same values in host memory, where the schedule decides the keys each chunk skips (the CPU
  // tests pass one pointer for both); null: none (no key is skipped).
  const int32_t* key_start_host = nullptr;
  int64_t G() const { return H / Hkv; }
  // Elements of one [H, rows, S] score buffer.
  int64_t scores_numel() const { return H * rows * round_up(S, kChunkAlign); }
};

// The chunk height for S rows and H heads: as many rows (a multiple of kChunkAlign) as keep the
// backward's buffers within kChunkScoreBytes, at least kChunkAlign, at most S.
// rows > 0: that height instead (rounded up to kChunkAlign, at most S; the GPU tests' many
// chunks on small shapes).
inline int64_t chunk_rows(int64_t S, int64_t H, int64_t rows = 0) {
  const int64_t most = std::max(kChunkAlign, round_up(S, kChunkAlign));
  if (rows > 0) return std::min(round_up(rows, kChunkAlign), most);
  const int64_t per_row = 12 * std::max<int64_t>(H, 1) * most;
  const int64_t fit = std::max(kChunkAlign, kChunkScoreBytes / per_row / kChunkAlign * kChunkAlign);
  return std::min(fit, most);
}
inline ChunkShape chunk_shape(int64_t B, int64_t S, int64_t H, int64_t Hkv, int64_t D, bool causal,
                              int64_t rows = 0) {
  return ChunkShape{B, S, H, Hkv, D, causal, chunk_rows(S, H, rows)};
}
// Scratch in floats, laid out as the schedules below take it. Forward: the f32 scores, then the
// bf16 probabilities (half as many floats). Backward: scores and their gradient (f32), P and dS
// (bf16), delta [H, S], and the f32 accumulators of dK and dV [S, Hkv D] (used in bf16). The
// bf16 parts go unused by an f32 call: the numel does not know the dtype of the call.
inline int64_t chunked_forward_scratch_numel(const ChunkShape& c) {
  return c.scores_numel() + c.scores_numel() / 2;
}
// delta's region, rounded to 64 floats so that the accumulators after it start 256 bytes after the
// scratch's start (as aligned as the scratch itself, at least the arena's 64 bytes; cuBLASLt picks
// its kernels by the alignment of the real address)
inline int64_t delta_numel(const ChunkShape& c) { return round_up(c.H * c.S, 64); }
inline int64_t chunked_backward_scratch_numel(const ChunkShape& c) {
  return 3 * c.scores_numel() + delta_numel(c) + 2 * c.S * c.Hkv * c.D;
}

// One chunk's score rows: [H, n, ld] f32 scores, row (h, r) query i0 + r of head h over keys
// [k0, kend), column t being key k0 + t (cols() of them); under the causal mask it sees keys
// up to i0 + r, and with a key_start (the sequence's [S] rows of the mask's) keys from
// key_start[i0 + r] on: columns [first, visible). p16: where the bf16 probabilities go (same
// indices), null for f32 (in place).
struct ScoreRows {
  float* s = nullptr;
  uint16_t* p16 = nullptr;
  int64_t n = 0, ld = 0, kend = 0, i0 = 0;
  bool causal = true;
  const int32_t* key_start = nullptr;
  int64_t k0 = 0;  // the first key computed (Note [Chunked attention]); <= every row's first key
  MEMO_HD int64_t cols() const { return kend - k0; }
  MEMO_HD int64_t index(int64_t h, int64_t r) const { return (h * n + r) * ld; }
  MEMO_HD float* row(int64_t h, int64_t r) const { return s + index(h, r); }
  MEMO_HD int64_t visible(int64_t r) const { return (causal ? i0 + r + 1 : kend) - k0; }
  MEMO_HD int64_t first(int64_t r) const {
    const int64_t k = key_start == nullptr ? 0 : key_start[i0 + r];
    return k > k0 ? k - k0 : 0;
  }
  // Stores probability p of column t of row (h, r).
  MEMO_HD void put_prob(int64_t h, int64_t r, int64_t t, float p) const {
    if (p16)
      p16[index(h, r) + t] = to_bf16_bits(p);
    else
      s[index(h, r) + t] = p;
  }
};

// --- the softmax of one row: lanes, then a fixed tree ---
// Lane `lane`'s running max m and sum l of exp(s - m) over columns from + lane, from + lane +
// lanes, ... < n.
MEMO_HD inline void softmax_lane(const float* s, int64_t from, int64_t n, int lane, int lanes,
                                 float& m, float& l) {
  m = -INFINITY;
  l = 0.0f;
  for (int64_t t = from + lane; t < n; t += lanes) {
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
// Column t of the row once (m, l) is known: the probability, 0 outside the visible keys
// [first, visible).
MEMO_HD inline float softmax_prob(float s, int64_t t, int64_t first, int64_t visible, float m,
                                  float l) {
  return t >= first && t < visible ? exp_f(s - m) / l : 0.0f;
}

// --- delta and the backward's probabilities and their gradient, one item each ---
// delta[h S + i] = sum_d dout[b S + i, h D + d] o[b S + i, h D + d], in double in index order.
MEMO_HD inline void chunk_delta_item(float* delta, XMat dout, XMat o, int64_t S, int64_t D,
                                     int64_t b, int64_t h, int64_t i) {
  double sum = 0.0;
  for (int64_t d = 0; d < D; ++d)
    sum += double(dout.at(b * S + i, h * D + d)) * double(o.at(b * S + i, h * D + d));
  delta[h * S + i] = float(sum);
}
// p = exp(s - lse) where visible, else 0; ds = p (dp - delta). f32 (sc.p16 null): in place, s <- p
// and dp <- ds; bf16: p into sc.p16 and ds into ds16, each rounded once.
MEMO_HD inline void grad_scores_item(const ScoreRows& sc, float* dp_base, uint16_t* ds16,
                                     const float* lse, const float* delta, int64_t S, int64_t h,
                                     int64_t r, int64_t t) {
  const int64_t e = sc.index(h, r) + t, i = sc.i0 + r;
  const float p = t >= sc.first(r) && t < sc.visible(r) ? exp_f(sc.s[e] - lse[h * S + i]) : 0.0f;
  const float ds = p * (dp_base[e] - delta[h * S + i]);
  sc.put_prob(h, r, t, p);
  if (ds16)
    ds16[e] = to_bf16_bits(ds);
  else
    dp_base[e] = ds;
}

// --- the schedule ---
// Ops provides: gemm(const RowGemm&); softmax(const ScoreRows&, float* lse_b) (lse_b: [H, S] of
// this sequence; every row of sc to probabilities, its lse); zero(XMat) (f32); delta(float*
// delta, XMat dout, XMat o, int64_t b) (chunk_delta_item over [H, S] of sequence b);
// grad_scores(const ScoreRows&, float* dp, uint16_t* ds16, const float* lse_b, const float*
// delta) (grad_scores_item over every head, row and column t < sc.cols()); round_rows(XMat dst,
// XMat src) (dst = src rounded to bf16, element for element, both [rows, cols]).

inline const void* elem(const void* p, int64_t i, bool bf16) {
  return static_cast<const char*>(p) + i * (bf16 ? 2 : 4);
}
inline void* elem(void* p, int64_t i, bool bf16) {
  return static_cast<char*>(p) + i * (bf16 ? 2 : 4);
}
// Rows [r0, r0 + n) of x as a matrix of its own.
inline XMat row_block(XMat x, int64_t r0, int64_t n) {
  return XMat{x.ptr(r0, 0), n, x.cols, x.ld, x.bf16};
}

// The first key that the chunk of sequence b from query row i0 computes, keys [0, kend) in
// sight (Note [Chunked attention]): the kChunkAlign block of its first row's first key, at most
// the block of key kend - 1.
inline int64_t chunk_first_key(const ChunkShape& c, int64_t b, int64_t i0, int64_t kend) {
  if (c.key_start_host == nullptr) return 0;
  const int64_t k = std::min<int64_t>(c.key_start_host[b * c.S + i0], kend - 1);
  return k <= 0 ? 0 : k / kChunkAlign * kChunkAlign;
}
// The score rows of the chunk of sequence b from query row i0, in `scores` (and p16 for bf16).
inline ScoreRows chunk_scores(const ChunkShape& c, float* scores, uint16_t* p16, int64_t b,
                              int64_t i0) {
  const int64_t n = std::min(c.rows, c.S - i0), kend = c.causal ? i0 + n : c.S;
  const int64_t k0 = chunk_first_key(c, b, i0, kend);
  return ScoreRows{scores, p16, n,        round_up(kend - k0, kChunkAlign),
                   kend,   i0,  c.causal, c.key_start ? c.key_start + b * c.S : nullptr,
                   k0};
}

// S_h = scale Q_h K_g^T for the heads h = g G + j of one chunk of sequence b, into sc's rows.
inline RowGemm scores_product(const ChunkShape& c, const ScoreRows& sc, XMat q, XMat k, int64_t b,
                              int64_t j) {
  const int64_t D = c.D, G = c.G(), head_block = sc.n * sc.ld;
  RowGemm g;
  g.trans_b = true;
  g.m = sc.n, g.n = sc.cols(), g.k = D, g.alpha = 1.0f / std::sqrt(float(D));
  g.a = q.ptr(b * c.S + sc.i0, j * D), g.lda = q.ld, g.stride_a = G * D;
  g.b = k.ptr(b * c.S + sc.k0, 0), g.ldb = k.ld, g.stride_b = D;
  g.c = sc.s + j * head_block, g.ldc = sc.ld, g.stride_c = G * head_block;
  g.batch = c.Hkv, g.ab_bf16 = q.bf16;
  return g;
}

template <class Ops>
void chunked_attention_forward(Ops& ops, const ChunkShape& c, XMat o, float* lse, XMat q, XMat k,
                               XMat v, float* scratch) {
  const int64_t S = c.S, D = c.D, G = c.G();
  const bool bf16 = q.bf16;
  float* scores = scratch;
  uint16_t* p16 = bf16 ? reinterpret_cast<uint16_t*>(scratch + c.scores_numel()) : nullptr;
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t i0 = 0; i0 < S; i0 += c.rows) {
      const ScoreRows sc = chunk_scores(c, scores, p16, b, i0);
      const int64_t n = sc.n, head_block = n * sc.ld;  // one head's scores
      for (int64_t j = 0; j < G; ++j) ops.gemm(scores_product(c, sc, q, k, b, j));
      ops.softmax(sc, lse + b * c.H * S);
      for (int64_t j = 0; j < G; ++j) {
        RowGemm g;  // O_h = P_h V_g
        g.m = n, g.n = D, g.k = sc.cols();
        g.a = bf16 ? elem(p16, j * head_block, true) : scores + j * head_block;
        g.lda = sc.ld, g.stride_a = G * head_block;
        g.b = v.ptr(b * S + sc.k0, 0), g.ldb = v.ld, g.stride_b = D;
        g.c = o.ptr(b * S + i0, j * D), g.ldc = o.ld, g.stride_c = G * D;
        g.batch = c.Hkv, g.ab_bf16 = bf16, g.c_bf16 = o.bf16;
        ops.gemm(g);
      }
    }
  }
}

template <class Ops>
void chunked_attention_backward(Ops& ops, const ChunkShape& c, XMat dq, XMat dk, XMat dv, XMat dout,
                                XMat q, XMat k, XMat v, XMat o, const float* lse, float* scratch) {
  const int64_t S = c.S, D = c.D, G = c.G(), KD = c.Hkv * D, SN = c.scores_numel();
  const bool bf16 = q.bf16;
  const float scale = 1.0f / std::sqrt(float(D));
  float* scores = scratch;
  float* dscores = scratch + SN;
  uint16_t* p16 = bf16 ? reinterpret_cast<uint16_t*>(scratch + 2 * SN) : nullptr;
  uint16_t* ds16 = bf16 ? p16 + SN : nullptr;
  float* delta = scratch + 3 * SN;
  // dK and dV accumulate in f32: in place for f32, in scratch (one sequence) for bf16
  float* acc = delta + delta_numel(c);
  const XMat acc_k{acc, S, KD, KD, false}, acc_v{acc + S * KD, S, KD, KD, false};
  if (!bf16) {
    ops.zero(dk);
    ops.zero(dv);
  }
  for (int64_t b = 0; b < c.B; ++b) {
    const XMat dk_b = bf16 ? acc_k : row_block(dk, b * S, S);
    const XMat dv_b = bf16 ? acc_v : row_block(dv, b * S, S);
    if (bf16) {
      ops.zero(acc_k);
      ops.zero(acc_v);
    }
    ops.delta(delta, dout, o, b);
    const float* lse_b = lse + b * c.H * S;
    for (int64_t i0 = 0; i0 < S; i0 += c.rows) {
      const ScoreRows sc = chunk_scores(c, scores, p16, b, i0);
      const int64_t n = sc.n, head_block = n * sc.ld, k0 = sc.k0, cols = sc.cols();
      for (int64_t j = 0; j < G; ++j) {
        RowGemm g = scores_product(c, sc, q, k, b, j);  // S_h, then dP_h = dO_h V_g^T
        ops.gemm(g);
        g.alpha = 1.0f;
        g.a = dout.ptr(b * S + i0, j * D), g.lda = dout.ld;
        g.b = v.ptr(b * S + k0, 0), g.ldb = v.ld;
        g.c = dscores + j * head_block;
        ops.gemm(g);
      }
      ops.grad_scores(sc, dscores, ds16, lse_b, delta);
      // dS and P as the products read them
      const void* ds = bf16 ? static_cast<const void*>(ds16) : dscores;
      const void* p = bf16 ? static_cast<const void*>(p16) : scores;
      for (int64_t j = 0; j < G; ++j) {
        RowGemm g;  // dQ_h = scale dS_h K_g
        g.m = n, g.n = D, g.k = cols, g.alpha = scale;
        g.a = elem(ds, j * head_block, bf16), g.lda = sc.ld, g.stride_a = G * head_block;
        g.b = k.ptr(b * S + k0, 0), g.ldb = k.ld, g.stride_b = D;
        g.c = dq.ptr(b * S + i0, j * D), g.ldc = dq.ld, g.stride_c = G * D;
        g.batch = c.Hkv, g.ab_bf16 = bf16, g.c_bf16 = dq.bf16;
        ops.gemm(g);
        RowGemm t;  // dK_g += scale dS_h^T Q_h, dV_g += P_h^T dO_h (f32)
        t.trans_a = true;
        t.m = cols, t.n = D, t.k = n, t.alpha = scale, t.beta = 1.0f;
        t.a = elem(ds, j * head_block, bf16), t.lda = sc.ld, t.stride_a = G * head_block;
        t.b = q.ptr(b * S + i0, j * D), t.ldb = q.ld, t.stride_b = G * D;
        t.c = dk_b.ptr(k0, 0), t.ldc = dk_b.ld, t.stride_c = D;
        t.batch = c.Hkv, t.ab_bf16 = bf16;
        ops.gemm(t);
        t.alpha = 1.0f;
        t.a = elem(p, j * head_block, bf16);
        t.b = dout.ptr(b * S + i0, j * D), t.ldb = dout.ld;
        t.c = dv_b.ptr(k0, 0), t.ldc = dv_b.ld;
        ops.gemm(t);
      }
    }
    if (bf16) {
      ops.round_rows(row_block(dk, b * S, S), acc_k);
      ops.round_rows(row_block(dv, b * S, S), acc_v);
    }
  }
}

}  // namespace memo::cuda
