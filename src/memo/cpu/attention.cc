// Causal grouped-query attention, forward and backward, FlashAttention-2 style, fp32 on the CPU.
// Tiles of kAttnTile queries x kAttnTile keys are copied into per-thread scratch (padded to a
// multiple of the vector width, so the tile products need no tails); the S x S scores are never
// stored. Any head_dim D >= 1 works. Oracle: attention_reference.h (float64, full score matrix).
// See Note [Attention threads and determinism] for how the work is split over threads.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "memo/backend/checks.h"
#include "memo/cpu/kernels.h"

namespace memo::cpu {
namespace {

// Note [Attention threads and determinism]
// Every output element is computed by exactly one thread, in an order fixed by the shapes alone,
// so results are bitwise identical run to run (and do not depend on the thread count or on which
// thread takes which work item; dynamic schedules are therefore safe).
// Forward: work items are (b, h, query tile); each owns its o rows and lse entries. B*H == 1 still
//   gives S / kAttnTile items, so both cores are busy. Heavy items (late query tiles) go first.
// Backward, two schemes, chosen from (B*Hkv, threads):
//   by group: items are (b, kv head) groups. A group owns dk, dv of its kv head and dq of its
//     G = H/Hkv query heads, so one pass computes all five tile products per (key tile, query
//     tile) with no sharing: FlashAttention-2's loop (key tiles outer, dq accumulated in dq).
//     Used when the groups spread evenly: ceil(groups / threads) * threads <= 1.25 * groups.
//   split: otherwise (B*Hkv == 1, or 3 groups on 2 threads), pass 1 has items (b, kv head, key
//     tile) that own dk, dv rows of that key tile, and pass 2 has items (b, h, query tile) that
//     own dq rows, recomputing scores and dP. That costs 7 tile products instead of 5, but needs
//     no atomics and no per-thread O(S) dq partials (at S = 1M, G = 8, D = 128 those would be
//     4 GiB per thread); scratch stays O(threads * kAttnTile * D), independent of S.
constexpr int64_t kT = kAttnTile;
constexpr int64_t kW = 8;  // floats per vector: one AVX2 ymm register (this CPU has no AVX-512)
static_assert(kT % 16 == 0, "kAttnTile must be a multiple of 16 (two vectors of kW)");

typedef float Vec __attribute__((vector_size(kW * sizeof(float))));

inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(Vec));
  return v;
}
inline void store(float* p, Vec v) { std::memcpy(p, &v, sizeof(Vec)); }
// A broadcast. (Vec{} + x would cost an add, as x + 0 is not x for -0; a fill loop is not
// recognised as a broadcast by GCC 12.)
static_assert(kW == 8, "splat lists kW lanes");
inline Vec splat(float x) { return Vec{x, x, x, x, x, x, x, x}; }

// Makes GCC load v once into a register instead of folding the load into each of the 4 FMAs
// that use it: the tile products are bound by loads otherwise (measured: fwd+bwd at S = 2048,
// H = 8, D = 64 on one core took 0.64 s of CPU time without, 0.34 s with).
inline void keep_in_register(Vec& v) { asm("" : "+x"(v)); }

inline int64_t padded_dim(int64_t head_dim) { return (head_dim + kW - 1) / kW * kW; }

// exp(x) for x <= ~0, 8 lanes at a time, as in Cephes expf (relative error ~2e-7):
// x = n ln2 + r with |r| <= ln2/2, exp(r) by a degree-7 polynomial, 2^n through the exponent
// bits; 0 below kExpMin (masked scores are -inf). Written on vectors because glibc's vector expf
// needs -ffast-math, which memo does not use, and GCC would not if-convert a scalar version here.
typedef int32_t IVec __attribute__((vector_size(kW * sizeof(int32_t))));
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kExpMin = -87.0f;           // exp(-87) ~ 1.6e-38: still a normal float
constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: x + magic - magic rounds to nearest
inline Vec exp_neg(Vec x) {
  const Vec xc = x < kExpMin ? splat(kExpMin) : x;
  const Vec n = (xc * kLog2e + kRoundMagic) - kRoundMagic;
  const Vec r = (xc - n * kLn2Hi) - n * kLn2Lo;
  Vec p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const Vec y = p * r * r + r + 1.0f;
  const IVec bits = (__builtin_convertvector(n, IVec) + 127) << 23;
  const Vec two_n = (Vec)bits;  // same-size vector cast: a bit copy
  return x < kExpMin ? Vec{} : y * two_n;
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

// The shapes every entry point checks, in the dimension legend of STYLE.md.
struct AttnShape {
  int64_t B, S, H, Hkv, G, D, dp;
  bool causal;               // key j visible to query i only for j <= i (else every key)
  const int32_t* key_start;  // AttnMask::key_start, [B S]; null: key 0 for every row
  int64_t n_tiles() const { return (S + kT - 1) / kT; }
  int64_t tile_rows(int64_t t) const { return std::min(kT, S - t * kT); }
  // The first key row i of sequence b sees, in [0, S] (S: none).
  int64_t first_key(int64_t b, int64_t i) const {
    return key_start ? std::clamp<int64_t>(key_start[b * S + i], 0, S) : 0;
  }
  // The first key tile query tile qt of sequence b sees (n_tiles(): none). The tile's first row
  // has the smallest key_start (AttnMask: non-decreasing).
  int64_t first_key_tile(int64_t b, int64_t qt) const { return first_key(b, qt * kT) / kT; }
  // Query row i of tile qt sees the keys [lo, hi) of key tile kt (lo >= hi: none). Padded rows
  // (i past the tile's rows) take the bounds of an unmasked row, as their results are dropped.
  void visible(int64_t b, int64_t qt, int64_t kt, int64_t i, int64_t& lo, int64_t& hi) const {
    const int64_t nk = tile_rows(kt);
    hi = causal && kt == qt ? std::min(i + 1, nk) : nk;
    lo = key_start && i < tile_rows(qt)
             ? std::clamp<int64_t>(first_key(b, qt * kT + i) - kt * kT, 0, nk)
             : 0;
  }
};

AttnShape attn_shape(const AttnDims& d, const AttnMask& mask) {
  return {d.B, d.S, d.H, d.Hkv, d.G, d.D, padded_dim(d.D), mask.causal, mask.key_start.data()};
}

// Per-thread forward workspace, in floats: q, k^T, v, o-accumulator tiles (kT * dp each), the
// score tile (kT * kT), running max and sum (kT each).
int64_t forward_thread_numel(int64_t dp) { return 4 * kT * dp + kT * kT + 2 * kT; }
// Per-thread backward workspace: q, dO, k, k^T, v^T, dk, dv, dq tiles (kT * dp each), the P and
// dP/dS tiles (kT * kT each), lse and D = rowsum(dO * O) of a query tile (kT each).
int64_t backward_thread_numel(int64_t dp) { return 8 * kT * dp + 2 * kT * kT + 2 * kT; }

// Forward of one query tile qt of head h in sequence b: the online softmax of FlashAttention-2
// (Algorithm 1): per key tile, m_new = max(m, rowmax s), acc = acc * e^(m - m_new) + e^(s - m_new)
// v, l = l * e^(m - m_new) + rowsum e^(s - m_new); at the end o = acc / l, lse = m + log l.
void forward_query_tile(const Tensor& o, const Tensor& lse, const ConstTensor& q,
                        const ConstTensor& k, const ConstTensor& v, const AttnShape& s, int64_t b,
                        int64_t h, int64_t qt, float* ws) {
  const int64_t dp = s.dp, nq = s.tile_rows(qt), row0 = b * s.S + qt * kT;
  float* q_tile = ws;
  float* kt_tile = q_tile + kT * dp;
  float* v_tile = kt_tile + kT * dp;
  float* acc = v_tile + kT * dp;
  float* p = acc + kT * dp;
  float* m = p + kT * kT;
  float* l = m + kT;
  const float scale = 1.0f / std::sqrt(float(s.D));
  const int64_t hk = h / s.G;
  load_tile(q_tile, q, row0, nq, h * s.D, s.D, dp);
  std::fill(acc, acc + kT * dp, 0.0f);
  std::fill(m, m + kT, -std::numeric_limits<float>::infinity());
  std::fill(l, l + kT, 0.0f);
  // causal: key tiles after the query tile are skipped; key_start: those before the tile's first
  const int64_t kt_last = s.causal ? qt : s.n_tiles() - 1;
  for (int64_t kt = s.first_key_tile(b, qt); kt <= kt_last; ++kt) {
    const int64_t nk = s.tile_rows(kt), krow0 = b * s.S + kt * kT;
    load_tile_t(kt_tile, k, krow0, nk, hk * s.D, s.D, dp);
    load_tile(v_tile, v, krow0, nk, hk * s.D, s.D, dp);
    tile_dot_nt(p, q_tile, kt_tile, dp);
    for (int64_t i = 0; i < kT; ++i) {
      float* pi = p + i * kT;
      // Keys [lo, hi) are visible to query row i (AttnShape::visible).
      int64_t lo, hi;
      s.visible(b, qt, kt, i, lo, hi);
      if (lo >= hi) {  // none in this tile: the row's running state stays, it adds nothing
        std::fill(pi, pi + kT, 0.0f);
        continue;
      }
      float mx = m[i];
#pragma omp simd reduction(max : mx)
      for (int64_t j = lo; j < hi; ++j) {
        pi[j] *= scale;
        mx = std::max(mx, pi[j]);
      }
      std::fill(pi, pi + lo, -std::numeric_limits<float>::infinity());
      std::fill(pi + hi, pi + kT, -std::numeric_limits<float>::infinity());
      const float corr = std::exp(m[i] - mx);  // m[i] = -inf on the first tile: corr = 0
      Vec sum_v{};
      for (int64_t j = 0; j < kT; j += kW) {
        const Vec e = exp_neg(load(pi + j) - mx);
        store(pi + j, e);
        sum_v += e;
      }
      float sum = 0.0f;  // lanes in a fixed order: deterministic
      for (int64_t w = 0; w < kW; ++w) sum += sum_v[w];
      m[i] = mx;
      l[i] = l[i] * corr + sum;
      float* ai = acc + i * dp;
#pragma omp simd
      for (int64_t d = 0; d < dp; ++d) ai[d] *= corr;
    }
    tile_acc(acc, p, kT, 1, v_tile, dp);
  }
  for (int64_t i = 0; i < nq; ++i) {
    if (l[i] == 0.0f) {  // no key visible (AttnMask): o = 0, lse = -inf
      for (int64_t d = 0; d < s.D; ++d) o(row0 + i, h * s.D + d) = 0.0f;
      lse(b, h, qt * kT + i) = -std::numeric_limits<float>::infinity();
      continue;
    }
    const float inv_l = 1.0f / l[i];
    for (int64_t d = 0; d < s.D; ++d) o(row0 + i, h * s.D + d) = acc[i * dp + d] * inv_l;
    lse(b, h, qt * kT + i) = m[i] + std::log(l[i]);
  }
}

// The backward workspace of one thread, carved from ws (see backward_thread_numel).
struct BackwardTiles {
  float *q, *dout, *k, *kt, *vt, *dk, *dv, *dq;  // [kT][dp], kt and vt are [dp][kT]
  float *p, *ds;                                 // [kT][kT]: probabilities; dP, then dS
  float *lse, *delta;                            // [kT]
};
BackwardTiles backward_tiles(float* ws, int64_t dp) {
  BackwardTiles t;
  float** big[] = {&t.q, &t.dout, &t.k, &t.kt, &t.vt, &t.dk, &t.dv, &t.dq};
  for (float** f : big) *f = ws, ws += kT * dp;
  t.p = ws, ws += kT * kT;
  t.ds = ws, ws += kT * kT;
  t.lse = ws, ws += kT;
  t.delta = ws;
  return t;
}

struct BackwardArgs {
  ConstTensor dout, q, k, v, o, lse;
};

// Query side of tile qt of head h: q and dO tiles, lse, and delta_i = rowsum(dO_i * O_i), which
// equals sum_j p_ij dp_ij (FlashAttention-2, section 3.1.2); padded rows are zero.
void load_query_side(const BackwardTiles& t, const BackwardArgs& a, const AttnShape& s, int64_t b,
                     int64_t h, int64_t qt) {
  const int64_t nq = s.tile_rows(qt), row0 = b * s.S + qt * kT;
  load_tile(t.q, a.q, row0, nq, h * s.D, s.D, s.dp);
  load_tile(t.dout, a.dout, row0, nq, h * s.D, s.D, s.dp);
  for (int64_t i = 0; i < kT; ++i) {
    float delta = 0.0f;
    if (i < nq) {
      const float* dout_i = &a.dout(row0 + i, h * s.D);
      const float* o_i = &a.o(row0 + i, h * s.D);
#pragma omp simd reduction(+ : delta)
      for (int64_t d = 0; d < s.D; ++d) delta += dout_i[d] * o_i[d];
    }
    t.delta[i] = delta;
    t.lse[i] = i < nq ? a.lse(b, h, qt * kT + i) : 0.0f;
  }
}

// Key side of tile kt of kv head hk: k, k^T and v^T tiles.
void load_key_side(const BackwardTiles& t, const BackwardArgs& a, const AttnShape& s, int64_t b,
                   int64_t hk, int64_t kt) {
  const int64_t nk = s.tile_rows(kt), row0 = b * s.S + kt * kT;
  load_tile(t.k, a.k, row0, nk, hk * s.D, s.D, s.dp);
  load_tile_t(t.kt, a.k, row0, nk, hk * s.D, s.D, s.dp);
  load_tile_t(t.vt, a.v, row0, nk, hk * s.D, s.D, s.dp);
}

// With both sides loaded: p_ij = exp(s_ij - lse_i) (0 where masked or padded), dp_ij = dO_i.v_j,
// ds_ij = p_ij (dp_ij - delta_i) / sqrt(D): the 1/sqrt(D) of dq and dk is folded into ds.
void probs_and_dscores(const BackwardTiles& t, const AttnShape& s, int64_t b, int64_t qt,
                       int64_t kt) {
  const int64_t nq = s.tile_rows(qt);
  const float scale = 1.0f / std::sqrt(float(s.D));
  tile_dot_nt(t.p, t.q, t.kt, s.dp);
  tile_dot_nt(t.ds, t.dout, t.vt, s.dp);
  for (int64_t i = 0; i < kT; ++i) {
    float* pi = t.p + i * kT;
    float* dsi = t.ds + i * kT;
    // Keys [lo, hi) are unmasked for query row i; none for padded rows.
    int64_t lo, hi;
    s.visible(b, qt, kt, i, lo, hi);
    if (i >= nq) lo = hi = 0;
    hi = std::max(lo, hi);
    const float lse_i = t.lse[i], delta_i = t.delta[i];
#pragma omp simd
    for (int64_t j = lo; j < hi; ++j) pi[j] = pi[j] * scale - lse_i;
    std::fill(pi, pi + lo, -std::numeric_limits<float>::infinity());
    std::fill(pi + hi, pi + kT, -std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < kT; j += kW) {
      const Vec p = exp_neg(load(pi + j));
      store(pi + j, p);
      store(dsi + j, p * (load(dsi + j) - delta_i) * scale);
    }
  }
}

// Key tile kt of kv head hk in sequence b, over all G query heads of the group and all query
// tiles at or after kt (FlashAttention-2, Algorithm 2): dv_j = sum_i p_ij dO_i, dk_j = sum_i
// ds_ij q_i; writes (overwrites) dk, dv rows of the tile. With add_dq, also dq_i += sum_j ds_ij k_j
// into dq, which the caller zeroed and owns (see Note [Attention threads and determinism]).
void backward_key_tile(const Tensor& dq, const Tensor& dk, const Tensor& dv, const BackwardArgs& a,
                       const AttnShape& s, int64_t b, int64_t hk, int64_t kt, bool add_dq,
                       float* ws) {
  const BackwardTiles t = backward_tiles(ws, s.dp);
  const int64_t dp = s.dp;
  load_key_side(t, a, s, b, hk, kt);
  std::fill(t.dk, t.dk + kT * dp, 0.0f);
  std::fill(t.dv, t.dv + kT * dp, 0.0f);
  for (int64_t g = 0; g < s.G; ++g) {
    const int64_t h = hk * s.G + g;
    for (int64_t qt = s.causal ? kt : 0; qt < s.n_tiles(); ++qt) {
      // key_start: later query tiles start later still (AttnMask), so none of them sees kt
      if (s.first_key_tile(b, qt) > kt) break;
      load_query_side(t, a, s, b, h, qt);
      probs_and_dscores(t, s, b, qt, kt);
      tile_acc(t.dv, t.p, 1, kT, t.dout, dp);  // dv[j] += sum_i p[i][j] dO[i]: p transposed
      tile_acc(t.dk, t.ds, 1, kT, t.q, dp);
      if (!add_dq) continue;
      std::fill(t.dq, t.dq + kT * dp, 0.0f);
      tile_acc(t.dq, t.ds, kT, 1, t.k, dp);
      const int64_t nq = s.tile_rows(qt), row0 = b * s.S + qt * kT;
      for (int64_t i = 0; i < nq; ++i) {
        float* dq_i = &dq(row0 + i, h * s.D);
#pragma omp simd
        for (int64_t d = 0; d < s.D; ++d) dq_i[d] += t.dq[i * dp + d];
      }
    }
  }
  const int64_t nk = s.tile_rows(kt), row0 = b * s.S + kt * kT;
  for (int64_t j = 0; j < nk; ++j)
    for (int64_t d = 0; d < s.D; ++d) {
      dk(row0 + j, hk * s.D + d) = t.dk[j * dp + d];
      dv(row0 + j, hk * s.D + d) = t.dv[j * dp + d];
    }
}

// dq of query tile qt of head h in sequence b: dq_i = sum_{j<=i} ds_ij k_j, recomputing p and dP
// per key tile (the split scheme's second pass). Overwrites dq rows of the tile.
void backward_query_tile(const Tensor& dq, const BackwardArgs& a, const AttnShape& s, int64_t b,
                         int64_t h, int64_t qt, float* ws) {
  const BackwardTiles t = backward_tiles(ws, s.dp);
  const int64_t dp = s.dp;
  load_query_side(t, a, s, b, h, qt);
  std::fill(t.dq, t.dq + kT * dp, 0.0f);
  const int64_t kt_last = s.causal ? qt : s.n_tiles() - 1;
  for (int64_t kt = s.first_key_tile(b, qt); kt <= kt_last; ++kt) {
    load_key_side(t, a, s, b, h / s.G, kt);
    probs_and_dscores(t, s, b, qt, kt);
    tile_acc(t.dq, t.ds, kT, 1, t.k, dp);
  }
  const int64_t nq = s.tile_rows(qt), row0 = b * s.S + qt * kT;
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t d = 0; d < s.D; ++d) dq(row0 + i, h * s.D + d) = t.dq[i * dp + d];
}

}  // namespace

int64_t attention_forward_scratch_numel(int64_t head_dim) {
  MEMO_CHECK(head_dim > 0, "attention_forward_scratch_numel: head_dim ", head_dim, " must be > 0");
  return int64_t(omp_get_max_threads()) * forward_thread_numel(padded_dim(head_dim));
}

void attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k, ConstTensor v,
                       int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                       AttnMask mask) {
  const AttnDims d = check_attention_forward(o, lse, q, k, v, batch, n_heads, n_kv_heads);
  check_attention_mask("attention_forward", mask, d, true);
  const AttnShape s = attn_shape(d, mask);
  const int64_t per_thread = forward_thread_numel(s.dp);
  const int threads = omp_get_max_threads();
  MEMO_CHECK(scratch.contiguous() && scratch.numel() >= threads * per_thread,
             "attention_forward: scratch has ", scratch.numel(), " floats, needs ",
             threads * per_thread, " (attention_forward_scratch_numel(", s.D, ") with ", threads,
             " threads)");
  const int64_t heads = s.B * s.H, n_items = heads * s.n_tiles();
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < n_items; ++item) {
    const int64_t qt = s.n_tiles() - 1 - item / heads;  // late (heavy) query tiles first
    const int64_t bh = item % heads;
    float* ws = scratch.data() + omp_get_thread_num() * per_thread;
    forward_query_tile(o, lse, q, k, v, s, bh / s.H, bh % s.H, qt, ws);
  }
}

int64_t attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                         int64_t n_kv_heads) {
  MEMO_CHECK(seq > 0 && head_dim > 0 && n_heads > 0 && n_kv_heads > 0,
             "attention_backward_scratch_numel: seq ", seq, ", head_dim ", head_dim, ", n_heads ",
             n_heads, ", n_kv_heads ", n_kv_heads, " must all be > 0");
  // threads * (8 kT dp + 2 kT^2 + 2 kT) floats, dp = head_dim rounded up to 8: independent of seq
  // and of the head counts (see Note [Attention threads and determinism]).
  return int64_t(omp_get_max_threads()) * backward_thread_numel(padded_dim(head_dim));
}

void attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout, ConstTensor q,
                        ConstTensor k, ConstTensor v, ConstTensor o, ConstTensor lse, int64_t batch,
                        int64_t n_heads, int64_t n_kv_heads, Tensor scratch, AttnMask mask) {
  const AttnDims d =
      check_attention_backward(dq, dk, dv, dout, q, k, v, o, lse, batch, n_heads, n_kv_heads);
  check_attention_mask("attention_backward", mask, d, true);
  const AttnShape s = attn_shape(d, mask);
  const int64_t per_thread = backward_thread_numel(s.dp);
  const int threads = omp_get_max_threads();
  MEMO_CHECK(scratch.contiguous() && scratch.numel() >= threads * per_thread,
             "attention_backward: scratch has ", scratch.numel(), " floats, needs ",
             threads * per_thread, " (attention_backward_scratch_numel(", s.S, ", ", s.D, ", ", s.H,
             ", ", s.Hkv, ") with ", threads, " threads)");
  const BackwardArgs a{dout, q, k, v, o, lse};
  const int64_t groups = s.B * s.Hkv, n_tiles = s.n_tiles();
  const bool by_group = (groups + threads - 1) / threads * threads * 4 <= groups * 5;
  if (by_group) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t b = g / s.Hkv, hk = g % s.Hkv;
      float* ws = scratch.data() + omp_get_thread_num() * per_thread;
      for (int64_t t = b * s.S; t < (b + 1) * s.S; ++t)
        std::fill(&dq(t, hk * s.G * s.D), &dq(t, hk * s.G * s.D) + s.G * s.D, 0.0f);
      for (int64_t kt = 0; kt < n_tiles; ++kt)
        backward_key_tile(dq, dk, dv, a, s, b, hk, kt, true, ws);
    }
    return;
  }
#pragma omp parallel
  {
    float* ws = scratch.data() + omp_get_thread_num() * per_thread;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < groups * n_tiles; ++item)  // early (heavy) key tiles first
      backward_key_tile(dq, dk, dv, a, s, item % groups / s.Hkv, item % s.Hkv, item / groups, false,
                        ws);
    const int64_t heads = s.B * s.H;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < heads * n_tiles; ++item) {  // late (heavy) query tiles first
      const int64_t bh = item % heads;
      backward_query_tile(dq, a, s, bh / s.H, bh % s.H, n_tiles - 1 - item / heads, ws);
    }
  }
}

}  // namespace memo::cpu
