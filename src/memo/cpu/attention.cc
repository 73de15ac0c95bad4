// Causal grouped-query attention, forward and backward, FlashAttention-2 style, fp32 on the CPU.
// Tiles of kAttnTile queries x kAttnTile keys are copied into per-thread scratch (padded to a
// multiple of the vector width, so the tile products need no tails); the S x S scores are never
// stored. Any head_dim D >= 1 works. Oracle: attention_reference.h (float64, full score matrix).
// The schedule, masks and softmax are attention_tiles.h's (Note [Attention threads and
// determinism]); this file holds the f32 tiles and their products.
#include <algorithm>
#include <cstring>

#include "memo/cpu/attention_tiles.h"
#include "memo/cpu/kernels.h"

namespace memo::cpu {
namespace {

using namespace attn;  // NOLINT(google-build-using-namespace): the tile helpers

inline int64_t padded_dim(int64_t head_dim) { return (head_dim + kW - 1) / kW * kW; }

// c[kT][kT] = a[kT][dp] . bt[dp][kT]  (bt is the transposed key or value tile). Register block:
// 4 rows x 16 columns (8 accumulators), vectorised over the key index.
void tile_dot_nt(float* c, const float* a, const float* bt, int64_t dp) {
  for (int64_t i = 0; i < kT; i += 4)
    for (int64_t j = 0; j < kT; j += 2 * kW) {
      Vec acc[4][2] = {};
      for (int64_t d = 0; d < dp; ++d) {
        Vec b0 = load(bt + d * kT + j), b1 = load(bt + d * kT + j + kW);
        keep_in_register(b0);
        keep_in_register(b1);
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) {
          const Vec ar = splat(a[(i + r) * dp + d]);
          acc[r][0] += ar * b0;
          acc[r][1] += ar * b1;
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        store(c + (i + r) * kT + j, acc[r][0]);
        store(c + (i + r) * kT + j + kW, acc[r][1]);
      }
    }
}

// c[kT][dp] += A . b[kT][dp], A(i, j) = a[i * a_rs + j * a_cs] (a kT x kT tile, or its transpose
// with a_rs = 1, a_cs = kT). Register block: 4 rows x NC vectors of columns.
template <int NC>
void tile_acc_block(float* c, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                    int64_t dp, int64_t col) {
  for (int64_t i = 0; i < kT; i += 4) {
    Vec acc[4][NC];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NC; ++v) acc[r][v] = load(c + (i + r) * dp + col + v * kW);
    for (int64_t j = 0; j < kT; ++j) {
      Vec bj[NC];
#pragma GCC unroll 4
      for (int v = 0; v < NC; ++v) {
        bj[v] = load(b + j * dp + col + v * kW);
        keep_in_register(bj[v]);
      }
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const Vec ar = splat(a[(i + r) * a_rs + j * a_cs]);
#pragma GCC unroll 4
        for (int v = 0; v < NC; ++v) acc[r][v] += ar * bj[v];
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NC; ++v) store(c + (i + r) * dp + col + v * kW, acc[r][v]);
  }
}

void tile_acc(float* c, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t dp) {
  int64_t col = 0;
  for (; col + 3 * kW <= dp; col += 3 * kW) tile_acc_block<3>(c, a, a_rs, a_cs, b, dp, col);
  if (dp - col == 2 * kW) tile_acc_block<2>(c, a, a_rs, a_cs, b, dp, col);
  if (dp - col == kW) tile_acc_block<1>(c, a, a_rs, a_cs, b, dp, col);
}

// Copies rows [r0, r0 + n) of a head's D columns (src(r, c0 + d)) into dst[kT][dp], zero-padded
// in both directions; or, transposed (load_tile_t), into dst[dp][kT].
void load_tile(float* dst, const ConstTensor& src, int64_t r0, int64_t n, int64_t c0, int64_t D,
               int64_t dp) {
  std::fill(dst, dst + kT * dp, 0.0f);
  for (int64_t r = 0; r < n; ++r) std::memcpy(dst + r * dp, &src(r0 + r, c0), D * sizeof(float));
}
void load_tile_t(float* dst, const ConstTensor& src, int64_t r0, int64_t n, int64_t c0, int64_t D,
                 int64_t dp) {
  std::fill(dst, dst + dp * kT, 0.0f);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t d = 0; d < D; ++d) dst[d * kT + r] = src(r0 + r, c0 + d);
}

// f32 tiles: q, dO, k, v row-major [kT][dp]; k^T and v^T [dp][kT] for the score products.
struct F32Tiles {
  using Elem = float;
  static constexpr bool kByGroup = true;
  static int64_t padded_dim(int64_t head_dim) { return cpu::padded_dim(head_dim); }
  static void put(float& dst, float x) { dst = x; }
  static float get(float x) { return x; }

  // Per-thread forward workspace, in floats: q, k^T, v, o-accumulator tiles (kT * dp each), the
  // score tile (kT * kT), running max and sum (kT each).
  static int64_t forward_numel(int64_t dp) { return 4 * kT * dp + kT * kT + 2 * kT; }
  struct Fwd {
    float *q, *kt, *v, *acc, *p, *m, *l;
    Fwd(float* ws, int64_t dp) {
      for (float** f : {&q, &kt, &v, &acc}) *f = ws, ws += kT * dp;
      p = ws, ws += kT * kT;
      m = ws, l = ws + kT;
    }
  };
  static void load_q(Fwd& t, const ConstTensor& q, int64_t row0, int64_t n, int64_t c0,
                     const AttnShape& s) {
    load_tile(t.q, q, row0, n, c0, s.D, s.dp);
  }
  static void load_kv(Fwd& t, const ConstTensor& k, const ConstTensor& v, int64_t row0, int64_t n,
                      int64_t c0, const AttnShape& s) {
    load_tile_t(t.kt, k, row0, n, c0, s.D, s.dp);
    load_tile(t.v, v, row0, n, c0, s.D, s.dp);
  }
  static void scores(Fwd& t, const AttnShape& s) { tile_dot_nt(t.p, t.q, t.kt, s.dp); }
  static void pv(Fwd& t, const AttnShape& s) { tile_acc(t.acc, t.p, kT, 1, t.v, s.dp); }

  // Per-thread backward workspace: q, dO, k, k^T, v^T, dk, dv, dq tiles (kT * dp each), the P and
  // dP/dS tiles (kT * kT each), lse and D = rowsum(dO * O) of a query tile (kT each).
  static int64_t backward_numel(int64_t dp) { return 8 * kT * dp + 2 * kT * kT + 2 * kT; }
  struct Bwd {
    float *q, *dout, *k, *kt, *vt, *dk, *dv, *dq;  // [kT][dp], kt and vt are [dp][kT]
    float *p, *ds;                                 // [kT][kT]: probabilities; dP, then dS
    float *lse, *delta;                            // [kT]
    Bwd(float* ws, int64_t dp) {
      for (float** f : {&q, &dout, &k, &kt, &vt, &dk, &dv, &dq}) *f = ws, ws += kT * dp;
      p = ws, ws += kT * kT;
      ds = ws, ws += kT * kT;
      lse = ws, delta = ws + kT;
    }
  };
  static void load_query_side(Bwd& t, const BackwardArgs<float>& a, int64_t row0, int64_t n,
                              int64_t c0, const AttnShape& s, bool) {
    load_tile(t.q, a.q, row0, n, c0, s.D, s.dp);
    load_tile(t.dout, a.dout, row0, n, c0, s.D, s.dp);
  }
  static void load_key_side(Bwd& t, const BackwardArgs<float>& a, int64_t row0, int64_t n,
                            int64_t c0, const AttnShape& s, bool for_dq) {
    if (for_dq) load_tile(t.k, a.k, row0, n, c0, s.D, s.dp);
    load_tile_t(t.kt, a.k, row0, n, c0, s.D, s.dp);
    load_tile_t(t.vt, a.v, row0, n, c0, s.D, s.dp);
  }
  static void scores(Bwd& t, const AttnShape& s) {
    tile_dot_nt(t.p, t.q, t.kt, s.dp);
    tile_dot_nt(t.ds, t.dout, t.vt, s.dp);
  }
  static void prepare(Bwd&, const AttnShape&, bool, bool) {}
  static void zero_key_grads(Bwd& t, const AttnShape& s) {
    std::fill(t.dk, t.dk + kT * s.dp, 0.0f);
    std::fill(t.dv, t.dv + kT * s.dp, 0.0f);
  }
  static void acc_key_grads(Bwd& t, const AttnShape& s) {
    tile_acc(t.dv, t.p, 1, kT, t.dout, s.dp);  // dv[j] += sum_i p[i][j] dO[i]: p transposed
    tile_acc(t.dk, t.ds, 1, kT, t.q, s.dp);
  }
  static void store_key_grads(const Tensor& dk, const Tensor& dv, const Bwd& t, int64_t row0,
                              int64_t n, int64_t c0, const AttnShape& s) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t d = 0; d < s.D; ++d) {
        dk(row0 + j, c0 + d) = t.dk[j * s.dp + d];
        dv(row0 + j, c0 + d) = t.dv[j * s.dp + d];
      }
  }
  static void zero_dq(Bwd& t, const AttnShape& s) { std::fill(t.dq, t.dq + kT * s.dp, 0.0f); }
  static void acc_dq(Bwd& t, const AttnShape& s) { tile_acc(t.dq, t.ds, kT, 1, t.k, s.dp); }
  static void store_dq(const Tensor& dq, const Bwd& t, int64_t row0, int64_t n, int64_t c0,
                       const AttnShape& s, bool add) {
    for (int64_t i = 0; i < n; ++i) {
      float* dq_i = &dq(row0 + i, c0);
      const float* src = t.dq + i * s.dp;
      if (add) {
#pragma omp simd
        for (int64_t d = 0; d < s.D; ++d) dq_i[d] += src[d];
      } else {
        for (int64_t d = 0; d < s.D; ++d) dq_i[d] = src[d];
      }
    }
  }
  static void zero_group_dq(const Tensor& dq, int64_t row0, int64_t n, int64_t c0, int64_t width) {
    for (int64_t t = row0; t < row0 + n; ++t) std::fill(&dq(t, c0), &dq(t, c0) + width, 0.0f);
  }
};

}  // namespace

int64_t attention_forward_scratch_numel(int64_t head_dim) {
  MEMO_CHECK(head_dim > 0, "attention_forward_scratch_numel: head_dim ", head_dim, " must be > 0");
  return int64_t(omp_get_max_threads()) * F32Tiles::forward_numel(padded_dim(head_dim));
}

void attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k, ConstTensor v,
                       int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                       AttnMask mask) {
  attn::attention_forward<F32Tiles>("attention_forward", o, lse, q, k, v, batch, n_heads,
                                    n_kv_heads, scratch, mask);
}

int64_t attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                         int64_t n_kv_heads) {
  MEMO_CHECK(seq > 0 && head_dim > 0 && n_heads > 0 && n_kv_heads > 0,
             "attention_backward_scratch_numel: seq ", seq, ", head_dim ", head_dim, ", n_heads ",
             n_heads, ", n_kv_heads ", n_kv_heads, " must all be > 0");
  // threads * (8 kT dp + 2 kT^2 + 2 kT) floats, dp = head_dim rounded up to 8: independent of seq
  // and of the head counts (see Note [Attention threads and determinism]).
  return int64_t(omp_get_max_threads()) * F32Tiles::backward_numel(padded_dim(head_dim));
}

void attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout, ConstTensor q,
                        ConstTensor k, ConstTensor v, ConstTensor o, ConstTensor lse, int64_t batch,
                        int64_t n_heads, int64_t n_kv_heads, Tensor scratch, AttnMask mask) {
  attn::attention_backward<F32Tiles>("attention_backward", dq, dk, dv, dout, q, k, v, o, lse, batch,
                                     n_heads, n_kv_heads, scratch, mask);
}

}  // namespace memo::cpu
