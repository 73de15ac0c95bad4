// The tiled FlashAttention-2 schedule of the CPU attention, written once over a tile policy:
// attention.cc instantiates it with f32 tiles and products, attention_bf16.cc with bf16 tiles and
// AVX512-BF16 products (Note [bf16 attention on the CPU]). The policy owns the tile layouts, the
// tile products and how outputs are stored; this header owns the masks, the online softmax, the
// probabilities and dS, and the split of the work over threads, so both precisions share them.
// Internal to cpu/.
#pragma once

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "memo/backend/checks.h"
#include "memo/cpu/kernels.h"

namespace memo::cpu::attn {

// Note [Attention threads and determinism]
// Every output element is computed by exactly one thread, in an order fixed by the shapes alone,
// so results are bitwise identical run to run (and do not depend on the thread count or on which
// thread takes which work item; dynamic schedules are therefore safe). The two backward schemes
// below sum each dq element's products in the same order too, so which one the thread count picks
// changes no bit (tested for both precisions): the f32 split scheme adds each key tile's partial,
// as the by-group one adds it into dq in place; the bf16 one chains them, as the group scratch's
// accumulator does.
// Forward: work items are (b, heads of one kv head, query tile); each owns its o rows and lse
//   entries, and lays out each key and value tile once for its heads (forward_item_heads: all G
//   of the group where that leaves every thread 4 items, else fewer, down to one). B*H == 1
//   still gives S / kAttnTile items, so both cores are busy. Heavy items (late query tiles) go
//   first. A head's bits do not depend on which other heads share its item.
// Backward, two schemes, chosen from (B*Hkv, threads):
//   by group: items are (b, kv head) groups. A group owns dk, dv of its kv head and dq of its
//     G = H/Hkv query heads, so one pass computes all five tile products per (key tile, query
//     tile) with no sharing: FlashAttention-2's loop (key tiles outer, dq accumulated over them).
//     Used when the groups spread evenly: ceil(groups / threads) * threads <= 1.25 * groups, and
//     where dq can accumulate: in place (f32), or in the group scratch (Note [Group scratch]).
//   split: otherwise (B*Hkv == 1, or 3 groups on 2 threads), pass 1 has items (b, kv head, key
//     tile) that own dk, dv rows of that key tile, and pass 2 has items (b, h, query tile) that
//     own dq rows, recomputing scores and dP. That costs 7 tile products instead of 5, but needs
//     no atomics and no per-thread O(S) dq partials (at S = 1M, G = 8, D = 128 those would be
//     4 GiB per thread); scratch stays O(threads * kAttnTile * D), independent of S.
//
// Note [Group scratch]
// A by-group item may keep two things of its group over the whole sequence, per thread, in the
// scratch after the tiles: delta_i = rowsum(dO_i * O_i) of its G heads ([G][S'] floats, S' = S
// rounded up to kT), computed once instead of once per (key tile, query tile) pair; and, for a
// policy whose dq cannot accumulate in place (bf16), an f32 dq accumulator [G][S'][dp]. Each dq
// element then sees the products of its key tiles in the same order (ascending) from the same
// zero as in the split scheme's second pass, which also recomputes the same P and dS, so the
// two schemes give the same bits for bf16 (tested); the group scratch saves that pass's two score
// products and softmax. A policy whose query side is laid out at a cost (P::kCachedQuerySide: the
// bf16 tiles' q and dO rows and their transposes) also keeps each query tile's layouts there,
// built once per group instead of once per (key tile, query tile) pair: the same values, so the
// same bits; where they would pass the bound the scratch goes without them. The scratch holds
// them only up to kGroupScratchBytes per thread (at
// D 32, G 2 the accumulator is 264 bytes a token: S 4096 takes 1.03 MiB); past it delta is
// recomputed per pair and a bf16 backward takes the split scheme. The sizes depend on S and G,
// never on the batch, so the group scratch is there (and unused) when the groups do not spread.
// Below the bound the size is affine in S; across it, a memory plan interpolated between two
// traced lengths (memo's --seq advice) is off by up to the bound times the threads.
constexpr int64_t kT = kAttnTile;
constexpr int64_t kGroupScratchBytes = int64_t(32) << 20;
constexpr int64_t kW = 8;  // floats per vector of the elementwise parts: one AVX2 ymm register
static_assert(kT % 32 == 0, "kAttnTile must be a multiple of 32 (two bf16 vectors of keys)");

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

// The elementwise row steps below on 16 lanes, where the policy's products are 512-bit
// (kWide): per lane the same operations as on 8 (so the same bits), and sums still
// accumulated in the 8 lanes' order (the low half of each 16, then the high half).
typedef float Vec16 __attribute__((vector_size(16 * sizeof(float))));
typedef int32_t IVec16 __attribute__((vector_size(16 * sizeof(int32_t))));
[[gnu::target("avx512f")]] inline Vec16 load16(const float* p) {
  Vec16 v;
  std::memcpy(&v, p, sizeof(Vec16));
  return v;
}
[[gnu::target("avx512f")]] inline void store16(float* p, Vec16 v) {
  std::memcpy(p, &v, sizeof(Vec16));
}
// exp_neg on 16 lanes (kCoarse false: the same bits), or, kCoarse, for x whose exp is used as
// bf16 (the bf16 tiles' P, rounded to 2^-9 relative, and the sums of it in l): the same
// reduction with a degree-4 polynomial instead of Cephes' degree 7, fitted to the relative error
// of exp on [-ln2/2, ln2/2] (an iterated weighted least squares): at most 5.4e-6 relative,
// evaluated in f32, against bf16's 3.9e-3; three fewer operations a vector.
template <bool kCoarse>
[[gnu::target("avx512f")]] inline Vec16 exp_neg16_as(Vec16 x) {
  const Vec16 xc = x < kExpMin ? Vec16{} + kExpMin : x;
  const Vec16 n = (xc * kLog2e + kRoundMagic) - kRoundMagic;
  const Vec16 r = (xc - n * kLn2Hi) - n * kLn2Lo;
  Vec16 p;
  if constexpr (kCoarse) {
    p = Vec16{} + 4.1277639568e-2f;
    p = p * r + 1.6753505170e-1f;
    p = p * r + 5.0005114079e-1f;
  } else {
    p = Vec16{} + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
  }
  const Vec16 y = p * r * r + r + 1.0f;
  // y 2^n by vscalefps: one rounding of the exact product, as y * two_n (n in [-126, 127])
  // rounds in exp_neg, so the same bits in one instruction instead of four.
  const __mmask16 seen = _mm512_cmp_ps_mask(__m512(x), _mm512_set1_ps(kExpMin), _CMP_NLT_US);
  return Vec16(_mm512_maskz_scalef_ps(seen, __m512(y), __m512(n)));
}

// Row i of online_softmax_step on 8 lanes, after the masking: the scaling and the running max
// (returned), then e^(s - mx) in place, its lane sums returned.
inline float scale_and_max(float* pi, float scale, float m) {
  Vec mx_v = splat(m);
  for (int64_t j = 0; j < kT; j += kW) {
    const Vec x = load(pi + j) * scale;
    store(pi + j, x);
    mx_v = mx_v < x ? x : mx_v;  // std::max's choice per lane
  }
  float mx = mx_v[0];
  for (int64_t w = 1; w < kW; ++w) mx = std::max(mx, mx_v[w]);
  return mx;
}
inline Vec exp_and_sum(float* pi, float mx) {
  Vec sum_v{};
  for (int64_t j = 0; j < kT; j += kW) {
    const Vec e = exp_neg(load(pi + j) - mx);
    store(pi + j, e);
    sum_v += e;
  }
  return sum_v;
}

// Note [Softmax rows in registers]
// On 16 lanes a tile row of kT = 64 scores is 4 registers, so the row steps below load it once,
// then scale, mask, take the maximum, exponentiate, sum and (bf16) round it there and store only
// the result: the same operations per element as the passes over memory they replace (so the same
// bits), without storing and reloading the row between passes. A row's masked keys become -inf by
// a select on the lane's key index.
constexpr int64_t kV16 = kT / 16;  // 16-lane vectors in a tile row
typedef Vec16 Row16[kV16];

// The lanes of vector v of a row outside the visible keys [lo, hi) become `fill`.
[[gnu::target("avx512f")]] inline Vec16 mask_keys(Vec16 x, int64_t v, int64_t lo, int64_t hi,
                                                  float fill) {
  const IVec16 key = IVec16{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15} + int32_t(16 * v);
  return (key >= int32_t(lo)) & (key < int32_t(hi)) ? x : Vec16{} + fill;
}

// The largest lane by a tree of maxima: the same value as a chain (a max rounds nothing), a
// quarter of the latency. (GCC 12's _mm512_reduce_max_ps trips its own maybe-uninitialized
// warning.)
[[gnu::target("avx512f")]] inline float max_lane(Vec16 x) {
  typedef float Vec4 __attribute__((vector_size(4 * sizeof(float))));
  const auto max = [](auto a, auto b) { return a < b ? b : a; };
  const Vec m8 = max(__builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7),
                     __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15));
  Vec4 m4 =
      max(__builtin_shufflevector(m8, m8, 0, 1, 2, 3), __builtin_shufflevector(m8, m8, 4, 5, 6, 7));
  m4 = max(m4, __builtin_shufflevector(m4, m4, 2, 3, 0, 1));
  m4 = max(m4, __builtin_shufflevector(m4, m4, 1, 0, 3, 2));
  return m4[0];
}

// One row of online_softmax_step in registers (Note [Softmax rows in registers]): x holds the raw
// scores of keys [0, kT), of which [lo, hi) are visible (lo < hi), and becomes e^(s - m_new); m,
// the row's lanes of l [kW] and its accumulator ai [dp] are updated. kCoarse: P is used as bf16
// (exp_neg16_as).
template <bool kCoarse>
[[gnu::target("avx512f")]] inline void softmax_row16(Row16& x, int64_t lo, int64_t hi, float scale,
                                                     float& m, float* l, float* ai, int64_t dp) {
  const bool masked = lo > 0 || hi < kT;
  Vec16 mx_v = Vec16{} + m;
  for (int64_t v = 0; v < kV16; ++v) {
    x[v] *= scale;
    if (masked) x[v] = mask_keys(x[v], v, lo, hi, -std::numeric_limits<float>::infinity());
    mx_v = mx_v < x[v] ? x[v] : mx_v;  // std::max's choice per lane
  }
  const float mx = max_lane(mx_v);
  Vec sum_v{};  // the 8 lanes' order: the low half of each 16, then the high half
  for (int64_t v = 0; v < kV16; ++v) {
    x[v] = exp_neg16_as<kCoarse>(x[v] - mx);
    sum_v += __builtin_shufflevector(x[v], x[v], 0, 1, 2, 3, 4, 5, 6, 7);
    sum_v += __builtin_shufflevector(x[v], x[v], 8, 9, 10, 11, 12, 13, 14, 15);
  }
  if (mx == m) {  // corr = e^0 = 1 exactly: l * 1 and acc * 1 change no bit
    store(l, load(l) + sum_v);
    return;
  }
  const float corr = std::exp(m - mx);  // m = -inf on the first tile: corr = 0
  m = mx;
  store(l, load(l) * corr + sum_v);
#pragma omp simd
  for (int64_t d = 0; d < dp; ++d) ai[d] *= corr;
}

// Row i of probs_and_dscores on 8 lanes: s * scale - lse over the whole row (before the
// masking), and after it p = e^s and ds = p (dp - delta) scale.
inline void shift_row(float* pi, float scale, float lse_i) {
  for (int64_t j = 0; j < kT; j += kW) store(pi + j, load(pi + j) * scale - lse_i);
}
inline void probs_row(float* pi, float* dsi, float scale, float delta_i) {
  for (int64_t j = 0; j < kT; j += kW) {
    const Vec pv = exp_neg(load(pi + j));
    store(pi + j, pv);
    store(dsi + j, pv * (load(dsi + j) - delta_i) * scale);
  }
}
// shift_row and probs_row in one pass, for a row with no masked key: the same operations on each
// element, without storing and reloading the shifted scores.
inline void shifted_probs_row(float* pi, float* dsi, float scale, float lse_i, float delta_i) {
  for (int64_t j = 0; j < kT; j += kW) {
    const Vec pv = exp_neg(load(pi + j) * scale - lse_i);
    store(pi + j, pv);
    store(dsi + j, pv * (load(dsi + j) - delta_i) * scale);
  }
}
// The same on 16 lanes in registers (Note [Softmax rows in registers]): from row i's raw scores
// pi and dP dsi, whose keys [lo, hi) are unmasked, its p and ds (kCoarse: used as bf16).
template <bool kCoarse>
[[gnu::target("avx512f")]] inline void probs_row16(const float* pi, const float* dsi, int64_t lo,
                                                   int64_t hi, float scale, float lse_i,
                                                   float delta_i, Row16& p, Row16& ds) {
  const bool masked = lo > 0 || hi < kT;
  for (int64_t v = 0; v < kV16; ++v) {
    Vec16 x = load16(pi + 16 * v) * scale - lse_i;
    if (masked) x = mask_keys(x, v, lo, hi, -std::numeric_limits<float>::infinity());
    p[v] = exp_neg16_as<kCoarse>(x);
    ds[v] = p[v] * (load16(dsi + 16 * v) - delta_i) * scale;
  }
}

// A 16 x 16 matrix of 32-bit elements (f32, or pairs of bf16) in 16 registers (r[i] its row i)
// becomes its transpose (r[j] its column j): 32-bit, then 64-bit interleaves within 128-bit lanes,
// then two rounds of lane shuffles.
[[gnu::target("avx512f")]] inline void transpose_16x16(__m512i r[16]) {
  // The masked forms with every lane set: the unmasked ones pass an undefined vector that GCC 12
  // then reports as maybe uninitialised.
  constexpr __mmask16 kAll16 = 0xffff;
  constexpr __mmask8 kAll8 = 0xff;
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_epi32(kAll16, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(kAll16, r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_maskz_unpacklo_epi64(kAll8, t[i], t[i + 2]);
    u[i + 1] = _mm512_maskz_unpackhi_epi64(kAll8, t[i], t[i + 2]);
    u[i + 2] = _mm512_maskz_unpacklo_epi64(kAll8, t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_maskz_unpackhi_epi64(kAll8, t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_maskz_shuffle_i32x4(kAll16, u[i], u[i + 4], 0x88);
    t[i + 4] = _mm512_maskz_shuffle_i32x4(kAll16, u[i], u[i + 4], 0xdd);
    t[i + 8] = _mm512_maskz_shuffle_i32x4(kAll16, u[i + 8], u[i + 12], 0x88);
    t[i + 12] = _mm512_maskz_shuffle_i32x4(kAll16, u[i + 8], u[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_maskz_shuffle_i32x4(kAll16, t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_maskz_shuffle_i32x4(kAll16, t[i], t[i + 8], 0xdd);
  }
}

// The shapes every entry point checks, in the dimension legend of STYLE.md; dp is the head
// dimension padded as the tile policy needs.
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

inline AttnShape attn_shape(const AttnDims& d, const AttnMask& mask, int64_t dp) {
  return {d.B, d.S, d.H, d.Hkv, d.G, d.D, dp, mask.causal, mask.key_start.data()};
}

// One key tile's step of the online softmax of FlashAttention-2 (Algorithm 1) over the raw
// scores p[kT][kT] of query tile qt: per row, m_new = max(m, rowmax s), acc *= e^(m - m_new),
// l = l e^(m - m_new) + rowsum e^(s - m_new), and the probabilities e^(s - m_new) (0 where masked)
// go to out: p itself (f32), or bf16 rows [kT][kT] rounded to nearest even, for the policy's P.v.
// l is kept as kW partial sums per row ([kT][kW]), summed in lane order once at the tile's end: a
// row step adds a vector instead of reducing one (a chain of kW dependent adds per row per key
// tile). On 8 lanes, over memory:
inline void online_softmax_step_narrow(float* p, float* m, float* l, float* acc, const AttnShape& s,
                                       int64_t b, int64_t qt, int64_t kt) {
  const float scale = 1.0f / std::sqrt(float(s.D));
  for (int64_t i = 0; i < kT; ++i) {
    float* pi = p + i * kT;
    // Keys [lo, hi) are visible to query row i (AttnShape::visible).
    int64_t lo, hi;
    s.visible(b, qt, kt, i, lo, hi);
    if (lo >= hi) {  // none in this tile: the row's running state stays, it adds nothing
      std::fill(pi, pi + kT, 0.0f);
      continue;
    }
    // The masked keys become -inf first (scaled, they stay -inf), so the scaling and the max run
    // on whole vectors: GCC 12 left an `omp simd` max over [lo, hi) scalar, a chain of one
    // 3-cycle max per key that cost as much as the tile's two products.
    std::fill(pi, pi + lo, -std::numeric_limits<float>::infinity());
    std::fill(pi + hi, pi + kT, -std::numeric_limits<float>::infinity());
    const float mx = scale_and_max(pi, scale, m[i]);
    const Vec sum_v = exp_and_sum(pi, mx);
    float* li = l + i * kW;
    if (mx == m[i]) {  // corr = e^0 = 1 exactly: l * 1 and acc * 1 change no bit
      store(li, load(li) + sum_v);
      continue;
    }
    const float corr = std::exp(m[i] - mx);  // m[i] = -inf on the first tile: corr = 0
    m[i] = mx;
    store(li, load(li) * corr + sum_v);
    float* ai = acc + i * s.dp;
#pragma omp simd
    for (int64_t d = 0; d < s.dp; ++d) ai[d] *= corr;
  }
}
// Row i of the 16-lane step: its raw scores in x, stepped by softmax_row16 (zeros where the row
// sees no key of the tile).
template <bool kCoarse>
[[gnu::target("avx512f")]] inline void softmax_step_row16(Row16& x, const float* p, float* m,
                                                          float* l, float* acc, const AttnShape& s,
                                                          int64_t b, int64_t qt, int64_t kt,
                                                          int64_t i, float scale) {
  int64_t lo, hi;
  s.visible(b, qt, kt, i, lo, hi);
  for (int64_t v = 0; v < kV16; ++v) x[v] = lo < hi ? load16(p + i * kT + 16 * v) : Vec16{};
  if (lo < hi) softmax_row16<kCoarse>(x, lo, hi, scale, m[i], l + i * kW, acc + i * s.dp, s.dp);
}
// On 16 lanes, each row in registers (Note [Softmax rows in registers]), into p:
[[gnu::target("avx512f")]] inline void online_softmax_step_wide(float* p, float* m, float* l,
                                                                float* acc, const AttnShape& s,
                                                                int64_t b, int64_t qt, int64_t kt,
                                                                float* out) {
  const float scale = 1.0f / std::sqrt(float(s.D));
  for (int64_t i = 0; i < kT; ++i) {
    Row16 x;
    softmax_step_row16<false>(x, p, m, l, acc, s, b, qt, kt, i, scale);
    for (int64_t v = 0; v < kV16; ++v) store16(out + i * kT + 16 * v, x[v]);
  }
}
// and into bf16 rows.
[[gnu::target("avx512f,avx512bw,avx512bf16")]] inline void online_softmax_step_wide(
    float* p, float* m, float* l, float* acc, const AttnShape& s, int64_t b, int64_t qt, int64_t kt,
    uint16_t* out) {
  static_assert(kV16 % 2 == 0, "a row is whole pairs of 16-lane vectors");
  const float scale = 1.0f / std::sqrt(float(s.D));
  for (int64_t i = 0; i < kT; ++i) {
    Row16 x;
    softmax_step_row16<true>(x, p, m, l, acc, s, b, qt, kt, i, scale);
    for (int64_t v = 0; v < kV16; v += 2)  // the same rounding as a row's conversion in memory
      _mm512_storeu_si512(out + i * kT + 16 * v, (__m512i)_mm512_cvtne2ps_pbh(x[v + 1], x[v]));
  }
}
template <bool kWide, class Out>
void online_softmax_step(float* p, float* m, float* l, float* acc, const AttnShape& s, int64_t b,
                         int64_t qt, int64_t kt, Out* out) {
  if constexpr (kWide) {
    online_softmax_step_wide(p, m, l, acc, s, b, qt, kt, out);
  } else {
    static_assert(std::is_same_v<Out, float>, "bf16 probabilities need the 16-lane steps");
    online_softmax_step_narrow(p, m, l, acc, s, b, qt, kt);
  }
}

// Keys [lo, hi) are unmasked for query row i of probs_and_dscores (lo == hi: none, as for padded
// rows).
inline void probs_keys(const AttnShape& s, int64_t b, int64_t qt, int64_t kt, int64_t i,
                       int64_t& lo, int64_t& hi) {
  s.visible(b, qt, kt, i, lo, hi);
  if (i >= s.tile_rows(qt)) lo = hi = 0;
  hi = std::max(lo, hi);
}

// From the raw scores p and dP = dO.v^T in ds (both [kT][kT]): p_ij = exp(s_ij - lse_i) (0 where
// masked or padded), ds_ij = p_ij (dp_ij - delta_i) / sqrt(D): the 1/sqrt(D) of dq and dk is
// folded into ds. In place, on 8 lanes:
inline void probs_and_dscores_narrow(float* p, float* ds, const float* lse, const float* delta,
                                     const AttnShape& s, int64_t b, int64_t qt, int64_t kt) {
  const float scale = 1.0f / std::sqrt(float(s.D));
  for (int64_t i = 0; i < kT; ++i) {
    float* pi = p + i * kT;
    float* dsi = ds + i * kT;
    int64_t lo, hi;
    probs_keys(s, b, qt, kt, i, lo, hi);
    const float lse_i = lse[i], delta_i = delta[i];
    if (lo == 0 && hi == kT) {
      shifted_probs_row(pi, dsi, scale, lse_i, delta_i);
      continue;
    }
    // The whole row on vectors, then the masked keys (lse_i may be -inf where a row sees none)
    shift_row(pi, scale, lse_i);
    std::fill(pi, pi + lo, -std::numeric_limits<float>::infinity());
    std::fill(pi + hi, pi + kT, -std::numeric_limits<float>::infinity());
    probs_row(pi, dsi, scale, delta_i);
  }
}
// and on 16 lanes.
[[gnu::target("avx512f")]] inline void probs_and_dscores_wide(float* p, float* ds, const float* lse,
                                                              const float* delta,
                                                              const AttnShape& s, int64_t b,
                                                              int64_t qt, int64_t kt) {
  const float scale = 1.0f / std::sqrt(float(s.D));
  for (int64_t i = 0; i < kT; ++i) {
    int64_t lo, hi;
    probs_keys(s, b, qt, kt, i, lo, hi);
    Row16 pv, dsv;
    probs_row16<false>(p + i * kT, ds + i * kT, lo, hi, scale, lse[i], delta[i], pv, dsv);
    for (int64_t v = 0; v < kV16; ++v) {
      store16(p + i * kT + 16 * v, pv[v]);
      store16(ds + i * kT + 16 * v, dsv[v]);
    }
  }
}

// Inputs of the backward, in the policy's element type E (lse always f32).
template <class E>
struct BackwardArgs {
  View<const E> dout, q, k, v, o;
  View<const float> lse;
};

// The policy P (attention.cc's F32Tiles, attention_bf16.cc's Bf16Tiles) provides, with E its
// element type and dp its padded head dimension:
//   forward_numel(dp, heads), backward_numel(dp): the per-thread workspace in floats;
//   Fwd: the forward workspace of an item's heads, Fwd(ws, dp), with float members p [kT][kT]
//   (shared) and, of the head chosen by head(g), acc [kT][dp], m [kT], l [kT][kW]; load_q(Fwd, q,
//   row0, n, c0, s), load_kv(Fwd, k, v, row0, n, c0, s), scores(Fwd, s) (p = q_tile . k_tile^T,
//   raw), probs(Fwd) (where the online softmax puts the probabilities: p itself as float*, or bf16
//   rows as uint16_t*), pv(Fwd, s) (acc += probs . v_tile); Bwd: the backward workspace, Bwd(ws,
//   dp), with float members p, ds [kT][kT], lse, delta [kT]; load_query_side(Bwd, a, row0, n, c0,
//   s, key_grads), load_key_side(Bwd, a, row0, n, c0, s, for_dq), scores(Bwd, s) (p = q.k^T, ds =
//   dO.v^T); kRoundsProbs: whether the policy computes P and dS itself from those
//   (round_probs_and_dscores(Bwd, s, b, qt, kt, key_grads, for_dq), into its own layouts: key_grads
//   for the key gradients' products, for_dq for dq's), else probs_and_dscores does in place;
//   zero_key_grads, acc_key_grads (dv += p^T dO, dk += ds^T q), store_key_grads, zero_dq (t.dq =
//   0), acc_dq(Bwd, acc, s) (acc [kT][dp] += ds k), store_dq(dq, src, row0, n, c0, s, add) (dq rows
//   (+)= src [kT][dp]); where kDqInPlace, add_dq_partial(Bwd, s) (t.dq += ds k computed from zero,
//   as store_dq adds it) and zero_group_dq(dq, row0, n, c0, width); put(E&, float) and get(const
//   E&): the output rounding and the widening of an element; kDqInPlace: whether dq may accumulate
//   over key tiles in its own dtype (else the by-group scheme needs the group scratch's f32
//   accumulator, Note [Group scratch]). kWide: whether the elementwise row steps run on 16 lanes
//   (the CPU has AVX-512F).
template <class P, class E = typename P::Elem>
void forward_query_tile(const View<E>& o, const View<float>& lse, const View<const E>& q,
                        const View<const E>& k, const View<const E>& v, const AttnShape& s,
                        int64_t b, int64_t h0, int64_t heads, int64_t qt, float* ws) {
  const int64_t nq = s.tile_rows(qt), row0 = b * s.S + qt * kT;
  typename P::Fwd t(ws, s.dp);
  const int64_t hk = h0 / s.G;
  for (int64_t g = 0; g < heads; ++g) {
    t.head(g);
    P::load_q(t, q, row0, nq, (h0 + g) * s.D, s);
    std::fill(t.acc, t.acc + kT * s.dp, 0.0f);
    std::fill(t.m, t.m + kT, -std::numeric_limits<float>::infinity());
    std::fill(t.l, t.l + kT * kW, 0.0f);
  }
  // causal: key tiles after the query tile are skipped; key_start: those before the tile's first
  const int64_t kt_last = s.causal ? qt : s.n_tiles() - 1;
  for (int64_t kt = s.first_key_tile(b, qt); kt <= kt_last; ++kt) {
    P::load_kv(t, k, v, b * s.S + kt * kT, s.tile_rows(kt), hk * s.D, s);
    for (int64_t g = 0; g < heads; ++g) {  // the masks are the same for every head
      t.head(g);
      P::scores(t, s);
      online_softmax_step<P::kWide>(t.p, t.m, t.l, t.acc, s, b, qt, kt, P::probs(t));
      P::pv(t, s);
    }
  }
  for (int64_t g = 0; g < heads; ++g) {
    t.head(g);
    const int64_t h = h0 + g;
    for (int64_t i = 0; i < nq; ++i) {
      float l_i = 0.0f;  // lanes in a fixed order: deterministic
      for (int64_t w = 0; w < kW; ++w) l_i += t.l[i * kW + w];
      if (l_i == 0.0f) {  // no key visible (AttnMask): o = 0, lse = -inf
        for (int64_t d = 0; d < s.D; ++d) P::put(o(row0 + i, h * s.D + d), 0.0f);
        lse(b, h, qt * kT + i) = -std::numeric_limits<float>::infinity();
        continue;
      }
      const float inv_l = 1.0f / l_i;
      for (int64_t d = 0; d < s.D; ++d)
        P::put(o(row0 + i, h * s.D + d), t.acc[i * s.dp + d] * inv_l);
      lse(b, h, qt * kT + i) = t.m[i] + std::log(l_i);
    }
  }
}

// delta_i = rowsum(dO_i * O_i) of query row `row` of head h, which equals sum_j p_ij dp_ij
// (FlashAttention-2, section 3.1.2).
template <class P, class E = typename P::Elem>
float row_delta(const BackwardArgs<E>& a, const AttnShape& s, int64_t row, int64_t h) {
  const E* dout_i = &a.dout(row, h * s.D);
  const E* o_i = &a.o(row, h * s.D);
  float delta = 0.0f;
#pragma omp simd reduction(+ : delta)
  for (int64_t d = 0; d < s.D; ++d) delta += P::get(dout_i[d]) * P::get(o_i[d]);
  return delta;
}

// delta of query tile qt's rows (0 for padded rows) into d[kT].
// Not inlined: one body computes every delta, so the cached ones (Note [Group scratch]) and
// the recomputed ones have the same bits.
template <class P, class E = typename P::Elem>
[[gnu::noinline]] void tile_deltas(float* d, const BackwardArgs<E>& a, const AttnShape& s,
                                   int64_t b, int64_t h, int64_t qt) {
  const int64_t nq = s.tile_rows(qt), row0 = b * s.S + qt * kT;
  for (int64_t i = 0; i < kT; ++i) d[i] = i < nq ? row_delta<P>(a, s, row0 + i, h) : 0.0f;
}

// The group scratch of Note [Group scratch]: delta [G][S'] and the f32 dq accumulator
// [G][S'][dp] (null where absent).
struct GroupScratch {
  float* delta = nullptr;
  float* dq = nullptr;
  float* query_side = nullptr;  // [G][n_tiles][P::query_side_numel(dp)] (Note [Group scratch])
};
inline int64_t padded_seq(const AttnShape& s) { return s.n_tiles() * kT; }
// Its floats per thread: 0 where it would pass kGroupScratchBytes. S + kT rows per head, not S':
// a size affine in S, as the planner's scale_trace assumes (S' <= S + kT - 1). With the cached
// query sides where they fit too, else without them.
template <class P>
int64_t group_base_numel(int64_t S, int64_t G, int64_t dp) {
  return G * (S + kT) * (1 + (P::kDqInPlace ? 0 : dp));
}
template <class P>
int64_t group_query_side_numel(int64_t S, int64_t G, int64_t dp) {
  if constexpr (P::kCachedQuerySide)
    return G * (S + kT) * (P::query_side_numel(dp) / kT);
  else
    return 0;
}
template <class P>
int64_t group_scratch_numel(int64_t S, int64_t G, int64_t dp) {
  const int64_t base = group_base_numel<P>(S, G, dp);
  const int64_t full = base + group_query_side_numel<P>(S, G, dp);
  if (full * int64_t(sizeof(float)) <= kGroupScratchBytes) return full;
  return base * int64_t(sizeof(float)) <= kGroupScratchBytes ? base : 0;
}

// Query side of tile qt of head h: q and dO tiles (P::load_query_side, or the group scratch's
// cached layouts where given), lse, and delta from the group scratch's deltas [S'] of head h where
// given, else computed; padded rows are zero.
template <class P, class E = typename P::Elem>
void load_query_side(typename P::Bwd& t, const BackwardArgs<E>& a, const AttnShape& s, int64_t b,
                     int64_t h, int64_t qt, bool key_grads, const float* deltas = nullptr,
                     float* cached = nullptr) {
  const int64_t nq = s.tile_rows(qt), row0 = b * s.S + qt * kT;
  if constexpr (P::kCachedQuerySide)
    if (cached) P::use_query_side(t, cached, s);
  if (!cached) P::load_query_side(t, a, row0, nq, h * s.D, s, key_grads);
  if (deltas)
    std::copy(deltas + qt * kT, deltas + qt * kT + kT, t.delta);
  else
    tile_deltas<P>(t.delta, a, s, b, h, qt);
  for (int64_t i = 0; i < kT; ++i) t.lse[i] = i < nq ? a.lse(b, h, qt * kT + i) : 0.0f;
}

template <class P>
void probs_and_dscores(typename P::Bwd& t, const AttnShape& s, int64_t b, int64_t qt, int64_t kt,
                       bool key_grads, bool for_dq) {
  P::scores(t, s);
  if constexpr (P::kRoundsProbs)
    P::round_probs_and_dscores(t, s, b, qt, kt, key_grads, for_dq);
  else if constexpr (P::kWide)
    probs_and_dscores_wide(t.p, t.ds, t.lse, t.delta, s, b, qt, kt);
  else
    probs_and_dscores_narrow(t.p, t.ds, t.lse, t.delta, s, b, qt, kt);
}

// Key tile kt of kv head hk in sequence b, over all G query heads of the group and all query
// tiles at or after kt (FlashAttention-2, Algorithm 2): dv_j = sum_i p_ij dO_i, dk_j = sum_i
// ds_ij q_i; writes (overwrites) dk, dv rows of the tile. With add_dq, also dq_i += sum_j ds_ij k_j
// into dq, which the caller zeroed and owns (see Note [Attention threads and determinism]).
template <class P, class E = typename P::Elem>
void backward_key_tile(const View<E>& dq, const View<E>& dk, const View<E>& dv,
                       const BackwardArgs<E>& a, const AttnShape& s, int64_t b, int64_t hk,
                       int64_t kt, bool add_dq, float* ws, const GroupScratch& gs = {}) {
  typename P::Bwd t(ws, s.dp);
  const int64_t nk = s.tile_rows(kt), krow0 = b * s.S + kt * kT, sp = padded_seq(s);
  P::load_key_side(t, a, krow0, nk, hk * s.D, s, add_dq);
  P::zero_key_grads(t, s);
  for (int64_t g = 0; g < s.G; ++g) {
    const int64_t h = hk * s.G + g;
    for (int64_t qt = s.causal ? kt : 0; qt < s.n_tiles(); ++qt) {
      // key_start: later query tiles start later still (AttnMask), so none of them sees kt
      if (s.first_key_tile(b, qt) > kt) break;
      float* cached = nullptr;
      if constexpr (P::kCachedQuerySide)
        if (gs.query_side)
          cached = gs.query_side + (g * s.n_tiles() + qt) * P::query_side_numel(s.dp);
      load_query_side<P>(t, a, s, b, h, qt, true, gs.delta ? gs.delta + g * sp : nullptr, cached);
      probs_and_dscores<P>(t, s, b, qt, kt, true, add_dq);
      P::acc_key_grads(t, s);
      if (!add_dq) continue;
      if constexpr (P::kDqInPlace) {
        P::zero_dq(t, s);
        P::acc_dq(t, t.dq, s);
        P::store_dq(dq, t.dq, b * s.S + qt * kT, s.tile_rows(qt), h * s.D, s, true);
      } else {
        P::acc_dq(t, gs.dq + (g * sp + qt * kT) * s.dp, s);
      }
    }
  }
  P::store_key_grads(dk, dv, t, krow0, nk, hk * s.D, s);
}

// A by-group item: group hk of sequence b, all its key tiles (Note [Group scratch]).
template <class P, class E = typename P::Elem>
void backward_group(const View<E>& dq, const View<E>& dk, const View<E>& dv,
                    const BackwardArgs<E>& a, const AttnShape& s, int64_t b, int64_t hk, float* ws,
                    float* group_ws, bool cache_query_sides) {
  GroupScratch gs;
  const int64_t sp = padded_seq(s);
  if (group_ws) {
    gs.delta = group_ws;
    for (int64_t g = 0; g < s.G; ++g)
      for (int64_t qt = 0; qt < s.n_tiles(); ++qt)
        tile_deltas<P>(gs.delta + g * sp + qt * kT, a, s, b, hk * s.G + g, qt);
    if constexpr (!P::kDqInPlace) {
      gs.dq = group_ws + s.G * sp;
      std::fill(gs.dq, gs.dq + s.G * sp * s.dp, 0.0f);
    }
    if constexpr (P::kCachedQuerySide)
      if (cache_query_sides) {
        gs.query_side = group_ws + s.G * sp * (1 + (P::kDqInPlace ? 0 : s.dp));
        const int64_t qs = P::query_side_numel(s.dp);
        for (int64_t g = 0; g < s.G; ++g)
          for (int64_t qt = 0; qt < s.n_tiles(); ++qt)
            P::build_query_side(gs.query_side + (g * s.n_tiles() + qt) * qs, a, b * s.S + qt * kT,
                                s.tile_rows(qt), (hk * s.G + g) * s.D, s);
      }
  }
  if constexpr (P::kDqInPlace) P::zero_group_dq(dq, b * s.S, s.S, hk * s.G * s.D, s.G * s.D);
  for (int64_t kt = 0; kt < s.n_tiles(); ++kt)
    backward_key_tile<P>(dq, dk, dv, a, s, b, hk, kt, true, ws, gs);
  if constexpr (!P::kDqInPlace)
    for (int64_t g = 0; g < s.G; ++g)
      for (int64_t qt = 0; qt < s.n_tiles(); ++qt)
        P::store_dq(dq, gs.dq + (g * sp + qt * kT) * s.dp, b * s.S + qt * kT, s.tile_rows(qt),
                    (hk * s.G + g) * s.D, s, false);
}

// dq of query tile qt of head h in sequence b: dq_i = sum_{j<=i} ds_ij k_j, recomputing p and dP
// per key tile (the split scheme's second pass). Overwrites dq rows of the tile.
template <class P, class E = typename P::Elem>
void backward_query_tile(const View<E>& dq, const BackwardArgs<E>& a, const AttnShape& s, int64_t b,
                         int64_t h, int64_t qt, float* ws) {
  typename P::Bwd t(ws, s.dp);
  load_query_side<P>(t, a, s, b, h, qt, false);
  P::zero_dq(t, s);
  const int64_t kt_last = s.causal ? qt : s.n_tiles() - 1;
  for (int64_t kt = s.first_key_tile(b, qt); kt <= kt_last; ++kt) {
    P::load_key_side(t, a, b * s.S + kt * kT, s.tile_rows(kt), h / s.G * s.D, s, true);
    probs_and_dscores<P>(t, s, b, qt, kt, false, true);
    // the sum the by-group scheme makes: per key tile in place, else chained in f32
    if constexpr (P::kDqInPlace)
      P::add_dq_partial(t, s);
    else
      P::acc_dq(t, t.dq, s);
  }
  P::store_dq(dq, t.dq, b * s.S + qt * kT, s.tile_rows(qt), h * s.D, s, false);
}

inline void check_forward_scratch_args(const char* name, int64_t head_dim, int64_t n_heads,
                                       int64_t n_kv_heads) {
  MEMO_CHECK(head_dim > 0 && n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0, name,
             ": head_dim ", head_dim, ", n_heads ", n_heads, ", n_kv_heads ", n_kv_heads,
             " must all be > 0, n_heads a multiple of n_kv_heads");
}

// The heads of one forward item (Note [Attention threads and determinism]): the largest divisor
// of G that still gives every thread 4 items, else 1.
inline int64_t forward_item_heads(const AttnShape& s, int threads) {
  for (int64_t heads = s.G; heads > 1; --heads)
    if (s.G % heads == 0 && s.B * s.H / heads * s.n_tiles() >= 4 * int64_t(threads)) return heads;
  return 1;
}

template <class P, class E = typename P::Elem>
void attention_forward(const char* name, View<E> o, View<float> lse, View<const E> q,
                       View<const E> k, View<const E> v, int64_t batch, int64_t n_heads,
                       int64_t n_kv_heads, Tensor scratch, AttnMask mask) {
  const AttnDims d = check_attention_forward(o, lse, q, k, v, batch, n_heads, n_kv_heads);
  check_attention_mask(name, mask, d, true);
  const AttnShape s = attn_shape(d, mask, P::padded_dim(d.D));
  const int64_t per_thread = P::forward_numel(s.dp, s.G);
  const int threads = omp_get_max_threads();
  MEMO_CHECK(scratch.contiguous() && scratch.numel() >= threads * per_thread, name,
             ": scratch has ", scratch.numel(), " floats, needs ", threads * per_thread, " (", name,
             "_scratch_numel(", s.D, ", ", s.H, ", ", s.Hkv, ") with ", threads, " threads)");
  const int64_t item_heads = forward_item_heads(s, threads);
  const int64_t units = s.B * s.H / item_heads, n_items = units * s.n_tiles();
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < n_items; ++item) {
    const int64_t qt = s.n_tiles() - 1 - item / units;  // late (heavy) query tiles first
    const int64_t bh = item % units * item_heads;       // its first head, as b * H + h
    float* ws = scratch.data() + omp_get_thread_num() * per_thread;
    forward_query_tile<P>(o, lse, q, k, v, s, bh / s.H, bh % s.H, item_heads, qt, ws);
  }
}

template <class P, class E = typename P::Elem>
void attention_backward(const char* name, View<E> dq, View<E> dk, View<E> dv, View<const E> dout,
                        View<const E> q, View<const E> k, View<const E> v, View<const E> o,
                        View<const float> lse, int64_t batch, int64_t n_heads, int64_t n_kv_heads,
                        Tensor scratch, AttnMask mask) {
  const AttnDims d =
      check_attention_backward(dq, dk, dv, dout, q, k, v, o, lse, batch, n_heads, n_kv_heads);
  check_attention_mask(name, mask, d, true);
  const AttnShape s = attn_shape(d, mask, P::padded_dim(d.D));
  const int64_t tiles_numel = P::backward_numel(s.dp);
  const int64_t group_numel = group_scratch_numel<P>(s.S, s.G, s.dp);
  const int64_t per_thread = tiles_numel + group_numel;
  const int threads = omp_get_max_threads();
  MEMO_CHECK(scratch.contiguous() && scratch.numel() >= threads * per_thread, name,
             ": scratch has ", scratch.numel(), " floats, needs ", threads * per_thread, " (", name,
             "_scratch_numel(", s.S, ", ", s.D, ", ", s.H, ", ", s.Hkv, ") with ", threads,
             " threads)");
  const BackwardArgs<E> a{dout, q, k, v, o, lse};
  const int64_t groups = s.B * s.Hkv, n_tiles = s.n_tiles();
  const bool by_group = (P::kDqInPlace || group_numel > 0) &&
                        (groups + threads - 1) / threads * threads * 4 <= groups * 5;
  if (by_group) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t g = 0; g < groups; ++g) {
      float* ws = scratch.data() + omp_get_thread_num() * per_thread;
      backward_group<P>(dq, dk, dv, a, s, g / s.Hkv, g % s.Hkv, ws,
                        group_numel > 0 ? ws + tiles_numel : nullptr,
                        group_numel > group_base_numel<P>(s.S, s.G, s.dp));
    }
    return;
  }
#pragma omp parallel
  {
    float* ws = scratch.data() + omp_get_thread_num() * per_thread;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < groups * n_tiles; ++item)  // early (heavy) key tiles first
      backward_key_tile<P>(dq, dk, dv, a, s, item % groups / s.Hkv, item % s.Hkv, item / groups,
                           false, ws);
    const int64_t heads = s.B * s.H;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < heads * n_tiles; ++item) {  // late (heavy) query tiles first
      const int64_t bh = item % heads;
      backward_query_tile<P>(dq, a, s, bh / s.H, bh % s.H, n_tiles - 1 - item / heads, ws);
    }
  }
}

}  // namespace memo::cpu::attn
