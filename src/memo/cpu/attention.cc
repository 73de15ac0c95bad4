// Causal grouped-query attention, forward and backward, FlashAttention-2 style, fp32 on the CPU.
// Tiles of kAttnTile queries x kAttnTile keys are copied into per-thread scratch (padded to a
// multiple of the vector width, so the tile products need no tails); the S x S scores are never
// stored. Any head_dim D >= 1 works. Oracle: attention_reference.h (float64, full score matrix).
// The schedule, masks and softmax are attention_tiles.h's (Note [Attention threads and
// determinism]); this file holds the f32 tiles and their products, on 256-bit vectors or, where
// the CPU has AVX-512, on 512-bit ones (Note [Wide tile products]).
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "memo/cpu/attention_tiles.h"
#include "memo/cpu/kernels.h"

namespace memo::cpu {
namespace {

using namespace attn;  // NOLINT(google-build-using-namespace): the tile helpers

inline int64_t padded_dim(int64_t head_dim) { return (head_dim + kW - 1) / kW * kW; }

// acc + a * b with one rounding, as the 512-bit products compute it (Note [Wide tile products]):
// written out, not left to GCC's contraction of acc += a * b, which -O1 (the sanitizer builds)
// does not do.
inline Vec fmadd(Vec a, Vec b, Vec acc) {
#ifdef __FMA__
  return Vec(_mm256_fmadd_ps(__m256(a), __m256(b), __m256(acc)));
#else
  return acc + a * b;
#endif
}

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
          acc[r][0] = fmadd(ar, b0, acc[r][0]);
          acc[r][1] = fmadd(ar, b1, acc[r][1]);
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
        for (int v = 0; v < NC; ++v) acc[r][v] = fmadd(ar, bj[v], acc[r][v]);
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

// Note [Wide tile products]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// On a CPU with AVX-512F the two products above run on 512-bit vectors instead: twice the
// multiply-adds per instruction, and register blocks of 16 accumulators (4 rows x the 64 keys of a
// score row; rows x up to 64 columns of an accumulation) that load 0.5-1 operands per multiply-add
// where the 256-bit blocks load 0.75. Element (i, j) of either product is still one chain of
// fused multiply-adds over the same index in the same order, starting from the same value, so
// both widths give the same bits (test: CpuAttention.wide_and_narrow_products_give_the_same_bits);
// the width only decides how many elements one instruction advances. MEMO_CPU_ISA=avx2 keeps the
// 256-bit products, as on a CPU without AVX-512 (read at each call, so a test can compare both).
// Both operands are pinned in registers: GCC otherwise folds one of them into each multiply-add
// as a memory operand, loading it once per accumulator (measured: that made the wide products no
// faster than the narrow ones).

bool wide_products() {
  if (!__builtin_cpu_supports("avx512f")) return false;
  const char* cap = std::getenv("MEMO_CPU_ISA");
  return cap == nullptr || std::strcmp(cap, "avx2") != 0;
}

[[gnu::target("avx512f")]] inline void pin(__m512& v) { asm("" : "+v"(v)); }

// tile_dot_nt on 512-bit vectors: register block 4 rows x 64 keys.
[[gnu::target("avx512f")]] void tile_dot_nt_wide(float* c, const float* a, const float* bt,
                                                 int64_t dp) {
  static_assert(kT == 64, "a score row is four 16-float vectors");
  for (int64_t i = 0; i < kT; i += 4) {
    __m512 acc[4][4];
    for (auto& row : acc)
      for (__m512& x : row) x = _mm512_setzero_ps();
    for (int64_t d = 0; d < dp; ++d) {
      __m512 b[4];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        b[v] = _mm512_loadu_ps(bt + d * kT + 16 * v);
        pin(b[v]);
      }
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        __m512 ar = _mm512_set1_ps(a[(i + r) * dp + d]);
        pin(ar);
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_fmadd_ps(ar, b[v], acc[r][v]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) _mm512_storeu_ps(c + (i + r) * kT + 16 * v, acc[r][v]);
  }
}

// tile_acc_block on 512-bit vectors: register block R rows x NC vectors of 16 columns.
template <int R, int NC>
[[gnu::target("avx512f")]] void tile_acc_block_wide(float* c, const float* a, int64_t a_rs,
                                                    int64_t a_cs, const float* b, int64_t dp,
                                                    int64_t col) {
  static_assert(kT % R == 0, "row blocks tile the tile");
  for (int64_t i = 0; i < kT; i += R) {
    __m512 acc[R][NC];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NC; ++v) acc[r][v] = _mm512_loadu_ps(c + (i + r) * dp + col + 16 * v);
    for (int64_t j = 0; j < kT; ++j) {
      __m512 bj[NC];
#pragma GCC unroll 4
      for (int v = 0; v < NC; ++v) {
        bj[v] = _mm512_loadu_ps(b + j * dp + col + 16 * v);
        pin(bj[v]);
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        __m512 ar = _mm512_set1_ps(a[(i + r) * a_rs + j * a_cs]);
        pin(ar);
#pragma GCC unroll 4
        for (int v = 0; v < NC; ++v) acc[r][v] = _mm512_fmadd_ps(ar, bj[v], acc[r][v]);
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NC; ++v) _mm512_storeu_ps(c + (i + r) * dp + col + 16 * v, acc[r][v]);
  }
}

// tile_acc on 512-bit vectors; a last 8 columns (dp is a multiple of 8) take the 256-bit block.
[[gnu::target("avx512f")]] void tile_acc_wide(float* c, const float* a, int64_t a_rs, int64_t a_cs,
                                              const float* b, int64_t dp) {
  int64_t col = 0;
  for (; col + 64 <= dp; col += 64) tile_acc_block_wide<4, 4>(c, a, a_rs, a_cs, b, dp, col);
  const int64_t rest = (dp - col) / 16;
  if (rest == 3) tile_acc_block_wide<4, 3>(c, a, a_rs, a_cs, b, dp, col);
  if (rest == 2) tile_acc_block_wide<8, 2>(c, a, a_rs, a_cs, b, dp, col);
  if (rest == 1) tile_acc_block_wide<16, 1>(c, a, a_rs, a_cs, b, dp, col);
  col += 16 * rest;
  if (col < dp) tile_acc_block<1>(c, a, a_rs, a_cs, b, dp, col);
}

// The products at the width the policy was built for.
template <bool kWide>
void dot_nt(float* c, const float* a, const float* bt, int64_t dp) {
  if constexpr (kWide) {
    tile_dot_nt_wide(c, a, bt, dp);
  } else {
    tile_dot_nt(c, a, bt, dp);
  }
}
template <bool kWide>
void acc_tile(float* c, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t dp) {
  if constexpr (kWide) {
    tile_acc_wide(c, a, a_rs, a_cs, b, dp);
  } else {
    tile_acc(c, a, a_rs, a_cs, b, dp);
  }
}

// Copies rows [r0, r0 + n) of a head's D columns (src(r, c0 + d)) into dst[kT][dp], zero-padded
// in both directions; or, transposed (load_tile_t), into dst[dp][kT].
void load_tile(float* dst, const ConstTensor& src, int64_t r0, int64_t n, int64_t c0, int64_t D,
               int64_t dp) {
  if (n != kT || D != dp) std::fill(dst, dst + kT * dp, 0.0f);  // a full tile is overwritten
  for (int64_t r = 0; r < n; ++r) std::memcpy(dst + r * dp, &src(r0 + r, c0), D * sizeof(float));
}
void load_tile_t(float* dst, const ConstTensor& src, int64_t r0, int64_t n, int64_t c0, int64_t D,
                 int64_t dp) {
  std::fill(dst, dst + dp * kT, 0.0f);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t d = 0; d < D; ++d) dst[d * kT + r] = src(r0 + r, c0 + d);
}
// load_tile_t on 512-bit vectors: blocks of 16 rows by 16 columns, transposed in registers. Rows
// past n and columns past D are zeros, so the tile needs no fill first.
[[gnu::target("avx512f")]] void load_tile_t_wide(float* dst, const ConstTensor& src, int64_t r0,
                                                 int64_t n, int64_t c0, int64_t D, int64_t dp) {
  for (int64_t q0 = 0; q0 < kT; q0 += 16)
    for (int64_t d0 = 0; d0 < dp; d0 += 16) {
      const __mmask16 m = __mmask16((1u << std::min<int64_t>(16, D - d0)) - 1);
      __m512i r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = q0 + i < n
                   ? _mm512_castps_si512(_mm512_maskz_loadu_ps(m, &src(r0 + q0 + i, c0 + d0)))
                   : _mm512_setzero_si512();
      transpose_16x16(r);
      for (int c = 0; c < 16 && d0 + c < dp; ++c)
        _mm512_storeu_si512(dst + (d0 + c) * kT + q0, r[c]);
    }
}
template <bool kWide>
void load_cols(float* dst, const ConstTensor& src, int64_t r0, int64_t n, int64_t c0, int64_t D,
               int64_t dp) {
  if constexpr (kWide) {
    load_tile_t_wide(dst, src, r0, n, c0, D, dp);
  } else {
    load_tile_t(dst, src, r0, n, c0, D, dp);
  }
}

// f32 tiles: q, dO, k, v row-major [kT][dp]; k^T and v^T [dp][kT] for the score products; the
// products on 512-bit vectors where kWide (Note [Wide tile products]).
template <bool kWideProducts>
struct F32Tiles {
  using Elem = float;
  static constexpr bool kWide = kWideProducts;
  static constexpr bool kDqInPlace = true;
  static constexpr bool kCachedQuerySide = false;  // its query side is two row copies
  static int64_t padded_dim(int64_t head_dim) { return cpu::padded_dim(head_dim); }
  static void put(float& dst, float x) { dst = x; }
  static float get(float x) { return x; }

  // Per-thread forward workspace, in floats: the k^T and v tiles (kT * dp each) and the score tile
  // (kT * kT), shared by the heads of an item; per head, its q and o-accumulator tiles (kT * dp
  // each), running max (kT) and sum (kT * kW).
  static int64_t forward_head_numel(int64_t dp) { return 2 * kT * dp + kT + kT * kW; }
  static int64_t forward_numel(int64_t dp, int64_t heads) {
    return 2 * kT * dp + kT * kT + heads * forward_head_numel(dp);
  }
  struct Fwd {
    float *kt, *v, *p;
    float *q = nullptr, *acc = nullptr, *m = nullptr, *l = nullptr;  // of the head in use
    float* heads;
    int64_t dp;
    Fwd(float* ws, int64_t dp_) : dp(dp_) {
      kt = ws, v = ws + kT * dp, p = ws + 2 * kT * dp;
      heads = p + kT * kT;
    }
    void head(int64_t g) {
      q = heads + g * forward_head_numel(dp);
      acc = q + kT * dp, m = acc + kT * dp, l = m + kT;  // l: kT * kW
    }
  };
  static void load_q(Fwd& t, const ConstTensor& q, int64_t row0, int64_t n, int64_t c0,
                     const AttnShape& s) {
    load_tile(t.q, q, row0, n, c0, s.D, s.dp);
  }
  static void load_kv(Fwd& t, const ConstTensor& k, const ConstTensor& v, int64_t row0, int64_t n,
                      int64_t c0, const AttnShape& s) {
    load_cols<kWide>(t.kt, k, row0, n, c0, s.D, s.dp);
    load_tile(t.v, v, row0, n, c0, s.D, s.dp);
  }
  static void scores(Fwd& t, const AttnShape& s) { dot_nt<kWide>(t.p, t.q, t.kt, s.dp); }
  static float* probs(Fwd& t) { return t.p; }
  static void pv(Fwd& t, const AttnShape& s) { acc_tile<kWide>(t.acc, t.p, kT, 1, t.v, s.dp); }

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
    load_cols<kWide>(t.kt, a.k, row0, n, c0, s.D, s.dp);
    load_cols<kWide>(t.vt, a.v, row0, n, c0, s.D, s.dp);
  }
  static void scores(Bwd& t, const AttnShape& s) {
    dot_nt<kWide>(t.p, t.q, t.kt, s.dp);
    dot_nt<kWide>(t.ds, t.dout, t.vt, s.dp);
  }
  static constexpr bool kRoundsProbs = false;  // P and dS stay f32, in place
  static void zero_key_grads(Bwd& t, const AttnShape& s) {
    std::fill(t.dk, t.dk + kT * s.dp, 0.0f);
    std::fill(t.dv, t.dv + kT * s.dp, 0.0f);
  }
  static void acc_key_grads(Bwd& t, const AttnShape& s) {
    acc_tile<kWide>(t.dv, t.p, 1, kT, t.dout, s.dp);  // dv[j] += sum_i p[i][j] dO[i]: p transposed
    acc_tile<kWide>(t.dk, t.ds, 1, kT, t.q, s.dp);
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
  static void acc_dq(Bwd& t, float* acc, const AttnShape& s) {
    acc_tile<kWide>(acc, t.ds, kT, 1, t.k, s.dp);
  }
  // t.dq += ds . k from zero, in t.dk (which a query tile's pass does not use): the split scheme's
  // sum made as the by-group one makes it in dq (Note [Attention threads and determinism]).
  static void add_dq_partial(Bwd& t, const AttnShape& s) {
    std::fill(t.dk, t.dk + kT * s.dp, 0.0f);
    acc_dq(t, t.dk, s);
#pragma omp simd
    for (int64_t e = 0; e < kT * s.dp; ++e) t.dq[e] += t.dk[e];
  }
  static void store_dq(const Tensor& dq, const float* tile, int64_t row0, int64_t n, int64_t c0,
                       const AttnShape& s, bool add) {
    for (int64_t i = 0; i < n; ++i) {
      float* dq_i = &dq(row0 + i, c0);
      const float* src = tile + i * s.dp;
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

int64_t attention_forward_scratch_numel(int64_t head_dim, int64_t n_heads, int64_t n_kv_heads) {
  check_forward_scratch_args("attention_forward_scratch_numel", head_dim, n_heads, n_kv_heads);
  return int64_t(omp_get_max_threads()) *
         F32Tiles<false>::forward_numel(padded_dim(head_dim), n_heads / n_kv_heads);
}

void attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k, ConstTensor v,
                       int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                       AttnMask mask) {
  if (wide_products()) {
    attn::attention_forward<F32Tiles<true>>("attention_forward", o, lse, q, k, v, batch, n_heads,
                                            n_kv_heads, scratch, mask);
  } else {
    attn::attention_forward<F32Tiles<false>>("attention_forward", o, lse, q, k, v, batch, n_heads,
                                             n_kv_heads, scratch, mask);
  }
}

int64_t attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                         int64_t n_kv_heads) {
  MEMO_CHECK(seq > 0 && head_dim > 0 && n_heads > 0 && n_kv_heads > 0,
             "attention_backward_scratch_numel: seq ", seq, ", head_dim ", head_dim, ", n_heads ",
             n_heads, ", n_kv_heads ", n_kv_heads, " must all be > 0");
  MEMO_CHECK(n_heads % n_kv_heads == 0, "attention_backward_scratch_numel: n_heads ", n_heads,
             " is not a multiple of n_kv_heads ", n_kv_heads);
  // threads * (8 kT dp + 2 kT^2 + 2 kT) floats, dp = head_dim rounded up to 8 (Note [Attention
  // threads and determinism]), and each thread's delta cache (Note [Group scratch]).
  const int64_t dp = padded_dim(head_dim);
  return int64_t(omp_get_max_threads()) *
         (F32Tiles<false>::backward_numel(dp) +
          group_scratch_numel<F32Tiles<false>>(seq, n_heads / n_kv_heads, dp));
}

void attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout, ConstTensor q,
                        ConstTensor k, ConstTensor v, ConstTensor o, ConstTensor lse, int64_t batch,
                        int64_t n_heads, int64_t n_kv_heads, Tensor scratch, AttnMask mask) {
  if (wide_products()) {
    attn::attention_backward<F32Tiles<true>>("attention_backward", dq, dk, dv, dout, q, k, v, o,
                                             lse, batch, n_heads, n_kv_heads, scratch, mask);
  } else {
    attn::attention_backward<F32Tiles<false>>("attention_backward", dq, dk, dv, dout, q, k, v, o,
                                              lse, batch, n_heads, n_kv_heads, scratch, mask);
  }
}

}  // namespace memo::cpu
