// Causal grouped-query attention over bf16 q, k, v, o, dO, dq, dk, dv on a CPU with AVX512-BF16:
// the schedule of attention_tiles.h with bf16 tiles whose six products run on vdpbf16ps (Note
// [bf16 attention on the CPU]) or, where the CPU has them, on AMX tiles (Note [AMX tiles for
// attention]). Oracle: attention_reference.h, within the bound tests/cpu/attention_bf16_test.cc
// derives.
#include <cpuid.h>
#include <errno.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "memo/cpu/attention_tiles.h"
#include "memo/cpu/kernels.h"

namespace memo::cpu {
namespace {

using namespace attn;  // NOLINT(google-build-using-namespace): the tile helpers

// Note [bf16 attention on the CPU]
// vdpbf16ps (AVX512-BF16) multiplies 16 pairs of bf16 and adds both products to 16 f32 lanes, so
// a product C += A . B reads A as bf16 pairs along the reduction index (a row-major A: a 32-bit
// broadcast of a[i][2p], a[i][2p+1]) and B as "pairs" [K/2][N][2] (b[2p][n], b[2p+1][n] adjacent).
// Every product accumulates in f32 and rounds nothing; what is rounded to bf16 is what a bf16
// GPU kernel rounds (FlashAttention-2): the probabilities P before P.V and P^T.dO, dS before
// dS.K and dS^T.q, and each output element once, from its f32 accumulator. The softmax, its
// statistics (m, l, lse) and delta stay f32, as in the f32 kernel (attention_tiles.h), with a
// shorter exp for the P that is rounded to bf16 (exp_neg16_as, 5.4e-6 relative). The products of
// one row are summed in an order fixed by the shapes, so runs repeat bit for bit.
// Layouts per tile, dp = D rounded up to 16 (a vector of f32 columns):
//   S = q.k^T:   q [kT][dp] rows,        k as pairs along d: [dp/2][kT][2]
//   dP = dO.v^T: dO [kT][dp] rows,       v as pairs along d
//   o += P.v:    P [kT][kT] rows (bf16), v as pairs along keys: [kT/2][dp][2]
//   dq += dS.k:  dS [kT][kT] rows,       k as pairs along keys
//   dv^T += dO^T.P, dk^T += q^T.dS: dO^T, q^T [dp][kT] rows, P and dS as pairs along queries;
//     dk and dv accumulate transposed ([dp][kT]), so no product needs a transposed P or dS.
// dq cannot accumulate over key tiles in bf16 (it would be rounded per tile), so the by-group
// scheme of Note [Attention threads and determinism] accumulates it in f32 in the group scratch
// (Note [Group scratch]: the split scheme's bits, with 5 tile products per tile pair instead of
// 7); past that scratch's bound the split scheme runs.
constexpr int64_t kLanes = 16;  // f32 lanes of a zmm register

inline int64_t padded_dim16(int64_t head_dim) { return (head_dim + kLanes - 1) / kLanes * kLanes; }

// c[M][N] (+)= a[M][K] . b for a bf16 row-major (ld K), b bf16 pairs [K/2][N][2], c f32 (ld N);
// M % 4 == 0, K % 2 == 0, N % 16 == 0. Register block: 4 rows x NC vectors of 16 columns.
template <int NC>
[[gnu::target("avx512f,avx512bw,avx512bf16")]] void dot_block(float* c, const uint16_t* a,
                                                              const uint16_t* b, int64_t M,
                                                              int64_t K, int64_t N, int64_t col,
                                                              bool accumulate) {
  for (int64_t i = 0; i < M; i += 4) {
    __m512 acc[4][NC];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NC; ++v)
        acc[r][v] =
            accumulate ? _mm512_loadu_ps(c + (i + r) * N + col + v * kLanes) : _mm512_setzero_ps();
    for (int64_t p = 0; p < K / 2; ++p) {
      __m512bh bv[NC];
#pragma GCC unroll 4
      for (int v = 0; v < NC; ++v) {
        bv[v] = (__m512bh)_mm512_loadu_si512(b + (p * N + col + v * kLanes) * 2);
        asm(""
            : "+v"(bv[v]));  // kept in a register, not reloaded for each row (as in attention.cc)
      }
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        int32_t pair;
        std::memcpy(&pair, a + (i + r) * K + 2 * p, sizeof pair);
        const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 4
        for (int v = 0; v < NC; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NC; ++v) _mm512_storeu_ps(c + (i + r) * N + col + v * kLanes, acc[r][v]);
  }
}

void dot(float* c, const uint16_t* a, const uint16_t* b, int64_t M, int64_t K, int64_t N,
         bool accumulate) {
  int64_t col = 0;
  for (; col + 4 * kLanes <= N; col += 4 * kLanes) dot_block<4>(c, a, b, M, K, N, col, accumulate);
  switch ((N - col) / kLanes) {
    case 3:
      return dot_block<3>(c, a, b, M, K, N, col, accumulate);
    case 2:
      return dot_block<2>(c, a, b, M, K, N, col, accumulate);
    case 1:
      return dot_block<1>(c, a, b, M, K, N, col, accumulate);
    default:
      return;
  }
}

// Note [AMX tiles for attention]
// On a CPU with AMX (Sapphire Rapids on) the six products run on tile registers instead: one
// tdpbf16ps multiplies a 16 x 32 bf16 tile by a 32 x 16 one held as 16 rows of pairs, the layout
// `dot` reads (b [K/2][N][2]), and adds the 16 x 16 f32 result to a third tile; so the layouts,
// the roundings and everything around the products stay as above. A block of 2 x 2 result tiles
// (32 x 32) shares each loaded operand tile twice, with the K/32 steps accumulated in the tiles
// in ascending order and stored once; a product's rows and columns go in steps of 16, its
// reduction in steps of 32, so the products over d (S = q.k^T, dP = dO.v^T) read q, dO, k and v
// with d padded to 32 (zeros past D) while dp, the outputs and the scratch sizes stay as for 16.
// A product's bits are fixed by the shapes, so runs repeat bit for bit and the two backward
// schemes agree as before; they differ from vdpbf16ps's (each tdpbf16ps sums 32 products in the
// hardware's own order), which the bound of the tests covers. Linux hands the tile state to a
// process only on request (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, made once); each thread
// loads the tile configuration at the start of each work item (oneDNN's kernels load their own
// in between) and releases the tiles at its end. MEMO_CPU_ISA below amx runs the vdpbf16ps
// products instead (read at each call, so a test can compare both).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// The CPU's AMX and Linux's answer to the request: 0 granted, else its errno (-1: no AMX).
int amx_request() {
  static const int answer = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return -1;
    constexpr unsigned kAmxBf16 = 1u << 22, kAmxTile = 1u << 24;
    if ((edx & kAmxBf16) == 0 || (edx & kAmxTile) == 0) return -1;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;  // <asm/prctl.h>
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0 ? 0 : errno;
  }();
  return answer;
}

bool amx_permitted() { return amx_request() == 0; }

// Tiles 0-7, each 16 rows of 64 bytes: 0-3 the f32 results, 4-5 a's rows, 6-7 b's pairs.
[[gnu::target("amx-tile")]] void amx_configure() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) config.colsb[t] = 64, config.rows[t] = 16;
  // GCC 12's _tile_loadconfig names only 8 bytes of the configuration as read, so the stores of
  // the rows and columns were dropped as dead (a #GP at ldtilecfg): the whole object here.
  asm volatile("ldtilecfg %0" : : "m"(config));
}
[[gnu::target("amx-tile")]] void amx_release() { _tile_release(); }

// One block of dot on tiles: result rows [i, i + 16 R), columns [j, j + 16 C), R, C in {1, 2}.
template <int R, int C>
[[gnu::target("amx-tile,amx-bf16")]] inline void amx_block(float* c, const uint16_t* a,
                                                           const uint16_t* b, int64_t i, int64_t j,
                                                           int64_t K, int64_t N, bool accumulate) {
  const int64_t lda = K * 2, ldb = N * 4, ldc = N * 4;  // bytes between rows
  float* c0 = c + i * N + j;
  float* c1 = c0 + 16 * N;
  if (accumulate) {
    _tile_loadd(0, c0, ldc);
    if constexpr (C == 2) _tile_loadd(1, c0 + 16, ldc);
    if constexpr (R == 2) _tile_loadd(2, c1, ldc);
    if constexpr (R == 2 && C == 2) _tile_loadd(3, c1 + 16, ldc);
  } else {
    _tile_zero(0);
    if constexpr (C == 2) _tile_zero(1);
    if constexpr (R == 2) _tile_zero(2);
    if constexpr (R == 2 && C == 2) _tile_zero(3);
  }
  for (int64_t k = 0; k < K; k += 32) {
    _tile_loadd(4, a + i * K + k, lda);
    if constexpr (R == 2) _tile_loadd(5, a + (i + 16) * K + k, lda);
    _tile_loadd(6, b + (k / 2 * N + j) * 2, ldb);
    if constexpr (C == 2) _tile_loadd(7, b + (k / 2 * N + j + 16) * 2, ldb);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (C == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (R == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (R == 2 && C == 2) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c0, ldc);
  if constexpr (C == 2) _tile_stored(1, c0 + 16, ldc);
  if constexpr (R == 2) _tile_stored(2, c1, ldc);
  if constexpr (R == 2 && C == 2) _tile_stored(3, c1 + 16, ldc);
}

// dot on tiles: c[M][N] (+)= a[M][K] . b, M and N multiples of 16, K of 32.
void amx_dot(float* c, const uint16_t* a, const uint16_t* b, int64_t M, int64_t K, int64_t N,
             bool accumulate) {
  for (int64_t i = 0; i < M; i += 32) {
    const bool two_rows = M - i >= 32;
    for (int64_t j = 0; j < N; j += 32) {
      const bool two_cols = N - j >= 32;
      if (two_rows && two_cols)
        amx_block<2, 2>(c, a, b, i, j, K, N, accumulate);
      else if (two_rows)
        amx_block<2, 1>(c, a, b, i, j, K, N, accumulate);
      else if (two_cols)
        amx_block<1, 2>(c, a, b, i, j, K, N, accumulate);
      else
        amx_block<1, 1>(c, a, b, i, j, K, N, accumulate);
    }
  }
}

// The two rows of a bf16 conversion of 16 + 16 lanes (row 2p's columns, then row 2p + 1's) as
// pairs along rows: the words (x[2p][j], x[2p + 1][j]).
alignas(64) constexpr uint16_t kInterleaveHalves[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                        21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                        11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

// Rows [r0, r0 + n) of a head's D columns of a bf16 tensor (src(r, c0 + d)) into a zero-padded
// tile: rows [kT][dp]; columns [dp][kT] (the transpose); pairs along d [dp/2][kT][2]; pairs along
// rows [kT/2][dp][2].
// A tile whose n rows and D columns fill it needs no zero padding first.
using Bf16In = View<const bf16>;
const uint16_t* row_bits(const Bf16In& src, int64_t r, int64_t c0) { return &src(r, c0).bits; }
void zero_unless_full(uint16_t* dst, int64_t n, int64_t D, int64_t dp) {
  if (n != kT || D != dp) std::fill(dst, dst + kT * dp, uint16_t(0));
}
void load_rows(uint16_t* dst, const Bf16In& src, int64_t r0, int64_t n, int64_t c0, int64_t D,
               int64_t dp) {
  zero_unless_full(dst, n, D, dp);
  for (int64_t r = 0; r < n; ++r) std::memcpy(dst + r * dp, row_bits(src, r0 + r, c0), D * 2);
}
// 16 bf16 elements of each of rows 2p and 2p + 1, interleaved: the 16 words (x[2p][d],
// x[2p + 1][d]). kInterleave picks lane k of the first operand, then lane k of the second.
alignas(64) constexpr uint16_t kInterleave[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                  37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                  11, 43, 12, 44, 13, 45, 14, 46, 15, 47};

// The transpose of the words (x[2p][d], x[2p + 1][d]) is the columns: 16 row pairs by 16 columns
// a step. Rows past n and columns past D are zeros, so the tile needs no fill first.
[[gnu::target("avx512f,avx512bw")]] void load_cols(uint16_t* dst, const Bf16In& src, int64_t r0,
                                                   int64_t n, int64_t c0, int64_t D, int64_t dp) {
  const __m512i idx = _mm512_load_si512(kInterleave);
  for (int64_t p0 = 0; p0 < kT / 2; p0 += 16)
    for (int64_t d0 = 0; d0 < dp; d0 += 16) {
      const __mmask32 m = _cvtu32_mask32((1u << std::clamp<int64_t>(D - d0, 0, 16)) - 1);
      __m512i r[16];
      for (int p = 0; p < 16; ++p) {
        const int64_t row = 2 * (p0 + p);
        const __m512i a = row < n ? _mm512_maskz_loadu_epi16(m, row_bits(src, r0 + row, c0) + d0)
                                  : _mm512_setzero_si512();
        const __m512i b = row + 1 < n
                              ? _mm512_maskz_loadu_epi16(m, row_bits(src, r0 + row + 1, c0) + d0)
                              : _mm512_setzero_si512();
        r[p] = _mm512_permutex2var_epi16(a, idx, b);
      }
      transpose_16x16(r);
      for (int c = 0; c < 16; ++c) _mm512_storeu_si512(dst + (d0 + c) * kT + 2 * p0, r[c]);
    }
}
// A pair (row[2p], row[2p + 1]) is one 32-bit word: the layout is the transpose of the rows'
// words, 16 rows by 16 words a step (an odd D's last column pairs with a zero). Rows past n and
// columns past D are zeros, so the tile needs no fill first.
[[gnu::target("avx512f,avx512bw")]] void load_pairs_along_d(uint16_t* dst, const Bf16In& src,
                                                            int64_t r0, int64_t n, int64_t c0,
                                                            int64_t D, int64_t dp) {
  for (int64_t q0 = 0; q0 < kT; q0 += 16)
    for (int64_t p0 = 0; p0 < dp / 2; p0 += 16) {
      const int64_t cols = std::clamp<int64_t>(D - 2 * p0, 0, 32);
      const __mmask32 m = _cvtu32_mask32(cols == 32 ? ~0u : (1u << cols) - 1);
      __m512i r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = q0 + i < n ? _mm512_maskz_loadu_epi16(m, row_bits(src, r0 + q0 + i, c0) + 2 * p0)
                          : _mm512_setzero_si512();
      transpose_16x16(r);
      for (int c = 0; c < 16 && p0 + c < dp / 2; ++c)
        _mm512_storeu_si512(dst + ((p0 + c) * kT + q0) * 2, r[c]);
    }
}
// Rows 2p and 2p + 1 interleaved element by element, 16 columns a step.
[[gnu::target("avx512f,avx512bw")]] void load_pairs_along_rows(uint16_t* dst, const Bf16In& src,
                                                               int64_t r0, int64_t n, int64_t c0,
                                                               int64_t D, int64_t dp) {
  zero_unless_full(dst, n, D, dp);
  const __m512i idx = _mm512_load_si512(kInterleave);
  for (int64_t r = 0; r < n; r += 2) {
    const uint16_t* even = row_bits(src, r0 + r, c0);
    const uint16_t* odd = r + 1 < n ? row_bits(src, r0 + r + 1, c0) : nullptr;
    uint16_t* out = dst + (r >> 1) * dp * 2;
    for (int64_t d = 0; d < D; d += kLanes) {
      const __mmask32 m = _cvtu32_mask32((1u << std::min<int64_t>(kLanes, D - d)) - 1);
      const __m512i a = _mm512_maskz_loadu_epi16(m, even + d);
      const __m512i b = odd ? _mm512_maskz_loadu_epi16(m, odd + d) : _mm512_setzero_si512();
      const __mmask32 pairs =
          _cvtu32_mask32(uint32_t((uint64_t(1) << (2 * std::min<int64_t>(kLanes, D - d))) - 1));
      _mm512_mask_storeu_epi16(out + d * 2, pairs, _mm512_permutex2var_epi16(a, idx, b));
    }
  }
}

// Carves n_f32 float tiles and then n_bf16 bf16 tiles of the given sizes from ws.
struct Carver {
  float* ws;
  float* f32(int64_t n) { return std::exchange(ws, ws + n); }
  uint16_t* bits(int64_t n) { return reinterpret_cast<uint16_t*>(std::exchange(ws, ws + n / 2)); }
};

// The tiles' products on vdpbf16ps (kAmx false) or AMX tiles (Note [AMX tiles for attention]).
template <bool kAmx>
struct Bf16Tiles {
  using Elem = bf16;
  static constexpr bool kWide = true;  // AVX512-BF16 implies AVX-512F
  static constexpr bool kDqInPlace = false;
  static int64_t padded_dim(int64_t head_dim) { return padded_dim16(head_dim); }
  // The reduction length of the products over d, and so the row length of their operands (q and
  // dO rows, k and v pairs along d): dp, or for AMX dp rounded up to 32 (zeros past D).
  static int64_t kdim(int64_t dp) { return kAmx ? (dp + 31) / 32 * 32 : dp; }
  static void mm(float* c, const uint16_t* a, const uint16_t* b, int64_t M, int64_t K, int64_t N,
                 bool accumulate) {
    if constexpr (kAmx)
      amx_dot(c, a, b, M, K, N, accumulate);
    else
      dot(c, a, b, M, K, N, accumulate);
  }
  // The tile configuration of a work item's thread, for as long as its workspace lives.
  struct Tiles {
    Tiles() {
      if constexpr (kAmx) amx_configure();
    }
    ~Tiles() {
      if constexpr (kAmx) amx_release();
    }
    Tiles(const Tiles&) = delete;
    Tiles& operator=(const Tiles&) = delete;
  };
  static void put(bf16& dst, float x) { dst = float_to_bf16(x); }
  static float get(bf16 x) { return bf16_to_float(x); }

  // Per-thread forward workspace, in floats: the scores (kT kT), then bf16 k pairs along d (kT
  // kdim), v pairs along keys (kT dp) and P (kT kT), shared by the heads of an item; per head, the
  // o accumulator (kT dp), m (kT) and l (kT kW), then its bf16 q rows (kT kdim).
  static int64_t forward_head_numel(int64_t dp) {
    return kT * dp + kT + kT * kW + kT * kdim(dp) / 2;
  }
  static int64_t forward_numel(int64_t dp, int64_t heads) {
    return kT * kT + (kT * kdim(dp) + kT * dp + kT * kT) / 2 + heads * forward_head_numel(dp);
  }
  struct Fwd {
    Tiles tiles;
    float* p;
    uint16_t *kp, *vp, *pb;
    float *acc = nullptr, *m = nullptr, *l = nullptr;  // of the head in use
    uint16_t* q = nullptr;
    float* heads;
    int64_t dp;
    Fwd(float* ws, int64_t dp_) : dp(dp_) {
      Carver c{ws};
      p = c.f32(kT * kT);
      kp = c.bits(kT * kdim(dp)), vp = c.bits(kT * dp), pb = c.bits(kT * kT);
      heads = c.ws;
    }
    void head(int64_t g) {
      Carver c{heads + g * forward_head_numel(dp)};
      acc = c.f32(kT * dp), m = c.f32(kT), l = c.f32(kT * kW);
      q = c.bits(kT * kdim(dp));
    }
  };
  static void load_q(Fwd& t, const Bf16In& q, int64_t row0, int64_t n, int64_t c0,
                     const AttnShape& s) {
    load_rows(t.q, q, row0, n, c0, s.D, kdim(s.dp));
  }
  static void load_kv(Fwd& t, const Bf16In& k, const Bf16In& v, int64_t row0, int64_t n, int64_t c0,
                      const AttnShape& s) {
    load_pairs_along_d(t.kp, k, row0, n, c0, s.D, kdim(s.dp));
    load_pairs_along_rows(t.vp, v, row0, n, c0, s.D, s.dp);
  }
  static void scores(Fwd& t, const AttnShape& s) { mm(t.p, t.q, t.kp, kT, kdim(s.dp), kT, false); }
  static uint16_t* probs(Fwd& t) { return t.pb; }  // rounded by the online softmax
  static void pv(Fwd& t, const AttnShape& s) { mm(t.acc, t.pb, t.vp, kT, kT, s.dp, true); }

  // Per-thread backward workspace, in floats: dq [kT][dp], dk^T and dv^T [dp][kT], P and dP/dS
  // [kT][kT], lse and delta [kT]; then bf16 q and dO rows and k and v pairs along d (kT kdim each),
  // q^T, dO^T and k pairs along keys (kT dp each), and P and dS as pairs along queries and dS as
  // rows (kT kT).
  static int64_t backward_numel(int64_t dp) {
    return 3 * kT * dp + 2 * kT * kT + 2 * kT + (4 * kT * kdim(dp) + 3 * kT * dp + 3 * kT * kT) / 2;
  }
  struct Bwd {
    Tiles tiles;
    float *dq, *dkt, *dvt, *p, *ds, *lse, *delta;
    uint16_t *q, *dout, *qt, *doutt, *kp, *vp, *kr, *pp, *dsp, *dsr;
    Bwd(float* ws, int64_t dp) {
      Carver c{ws};
      dq = c.f32(kT * dp), dkt = c.f32(kT * dp), dvt = c.f32(kT * dp);
      p = c.f32(kT * kT), ds = c.f32(kT * kT), lse = c.f32(kT), delta = c.f32(kT);
      for (uint16_t** b : {&q, &dout, &kp, &vp}) *b = c.bits(kT * kdim(dp));
      for (uint16_t** b : {&qt, &doutt, &kr}) *b = c.bits(kT * dp);
      for (uint16_t** b : {&pp, &dsp, &dsr}) *b = c.bits(kT * kT);
    }
  };
  static void load_query_side(Bwd& t, const BackwardArgs<bf16>& a, int64_t row0, int64_t n,
                              int64_t c0, const AttnShape& s, bool key_grads) {
    load_rows(t.q, a.q, row0, n, c0, s.D, kdim(s.dp));
    load_rows(t.dout, a.dout, row0, n, c0, s.D, kdim(s.dp));
    if (!key_grads) return;
    load_cols(t.qt, a.q, row0, n, c0, s.D, s.dp);
    load_cols(t.doutt, a.dout, row0, n, c0, s.D, s.dp);
  }
  // The query side of one tile kept in the group scratch (Note [Group scratch]): q and dO rows
  // (kT kdim each), q^T and dO^T (kT dp each), laid out once per query tile instead of once per
  // (key tile, query tile) pair.
  static constexpr bool kCachedQuerySide = true;
  static int64_t query_side_numel(int64_t dp) { return kT * (kdim(dp) + dp); }
  struct QuerySide {
    uint16_t *q, *dout, *qt, *doutt;
    QuerySide(float* cache, int64_t dp) {
      Carver c{cache};
      q = c.bits(kT * kdim(dp)), dout = c.bits(kT * kdim(dp));
      qt = c.bits(kT * dp), doutt = c.bits(kT * dp);
    }
  };
  static void build_query_side(float* cache, const BackwardArgs<bf16>& a, int64_t row0, int64_t n,
                               int64_t c0, const AttnShape& s) {
    const QuerySide qs(cache, s.dp);
    load_rows(qs.q, a.q, row0, n, c0, s.D, kdim(s.dp));
    load_rows(qs.dout, a.dout, row0, n, c0, s.D, kdim(s.dp));
    load_cols(qs.qt, a.q, row0, n, c0, s.D, s.dp);
    load_cols(qs.doutt, a.dout, row0, n, c0, s.D, s.dp);
  }
  static void use_query_side(Bwd& t, float* cache, const AttnShape& s) {
    const QuerySide qs(cache, s.dp);
    t.q = qs.q, t.dout = qs.dout, t.qt = qs.qt, t.doutt = qs.doutt;
  }
  static void load_key_side(Bwd& t, const BackwardArgs<bf16>& a, int64_t row0, int64_t n,
                            int64_t c0, const AttnShape& s, bool for_dq) {
    load_pairs_along_d(t.kp, a.k, row0, n, c0, s.D, kdim(s.dp));
    load_pairs_along_d(t.vp, a.v, row0, n, c0, s.D, kdim(s.dp));
    if (for_dq) load_pairs_along_rows(t.kr, a.k, row0, n, c0, s.D, s.dp);
  }
  static void scores(Bwd& t, const AttnShape& s) {
    mm(t.p, t.q, t.kp, kT, kdim(s.dp), kT, false);
    mm(t.ds, t.dout, t.vp, kT, kdim(s.dp), kT, false);
  }
  // P and dS of two query rows at a time in registers (Note [Softmax rows in registers]), rounded
  // to nearest even into P and dS as pairs along queries (key_grads) and dS as rows (for_dq).
  static constexpr bool kRoundsProbs = true;
  [[gnu::target("avx512f,avx512bw,avx512bf16")]] static void round_probs_and_dscores(
      Bwd& t, const AttnShape& s, int64_t b, int64_t qt, int64_t kt, bool key_grads, bool for_dq) {
    const __m512i interleave = _mm512_load_si512(kInterleaveHalves);
    const float scale = 1.0f / std::sqrt(float(s.D));
    for (int64_t i = 0; i < kT; i += 2) {
      Row16 p0, ds0, p1, ds1;  // rows i and i + 1, in registers
      int64_t lo, hi;
      probs_keys(s, b, qt, kt, i, lo, hi);
      probs_row16<true>(t.p + i * kT, t.ds + i * kT, lo, hi, scale, t.lse[i], t.delta[i], p0, ds0);
      probs_keys(s, b, qt, kt, i + 1, lo, hi);
      probs_row16<true>(t.p + (i + 1) * kT, t.ds + (i + 1) * kT, lo, hi, scale, t.lse[i + 1],
                        t.delta[i + 1], p1, ds1);
      if (key_grads)
        for (int64_t v = 0; v < kV16; ++v) {  // the words (row i, row i + 1) per key
          const int64_t at = (i / 2 * kT + 16 * v) * 2;
          const __m512bh pw = _mm512_cvtne2ps_pbh(p1[v], p0[v]);
          const __m512bh dsw = _mm512_cvtne2ps_pbh(ds1[v], ds0[v]);
          _mm512_storeu_si512(t.pp + at, _mm512_permutexvar_epi16(interleave, (__m512i)pw));
          _mm512_storeu_si512(t.dsp + at, _mm512_permutexvar_epi16(interleave, (__m512i)dsw));
        }
      if (for_dq)
        for (int64_t v = 0; v < kV16; v += 2) {
          _mm512_storeu_si512(t.dsr + i * kT + 16 * v,
                              (__m512i)_mm512_cvtne2ps_pbh(ds0[v + 1], ds0[v]));
          _mm512_storeu_si512(t.dsr + (i + 1) * kT + 16 * v,
                              (__m512i)_mm512_cvtne2ps_pbh(ds1[v + 1], ds1[v]));
        }
    }
  }
  static void zero_key_grads(Bwd& t, const AttnShape& s) {
    std::fill(t.dkt, t.dkt + kT * s.dp, 0.0f);
    std::fill(t.dvt, t.dvt + kT * s.dp, 0.0f);
  }
  static void acc_key_grads(Bwd& t, const AttnShape& s) {
    mm(t.dvt, t.doutt, t.pp, s.dp, kT, kT, true);  // dv^T[d][j] += sum_i dO[i][d] p[i][j]
    mm(t.dkt, t.qt, t.dsp, s.dp, kT, kT, true);
  }
  static void store_key_grads(const View<bf16>& dkv, const View<bf16>& dvv, const Bwd& t,
                              int64_t row0, int64_t n, int64_t c0, const AttnShape& s) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t d = 0; d < s.D; ++d) {
        dkv(row0 + j, c0 + d) = float_to_bf16(t.dkt[d * kT + j]);
        dvv(row0 + j, c0 + d) = float_to_bf16(t.dvt[d * kT + j]);
      }
  }
  static void zero_dq(Bwd& t, const AttnShape& s) { std::fill(t.dq, t.dq + kT * s.dp, 0.0f); }
  static void acc_dq(Bwd& t, float* acc, const AttnShape& s) {
    mm(acc, t.dsr, t.kr, kT, kT, s.dp, true);
  }
  static void store_dq(const View<bf16>& dqv, const float* tile, int64_t row0, int64_t n,
                       int64_t c0, const AttnShape& s, bool) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t d = 0; d < s.D; ++d) dqv(row0 + i, c0 + d) = float_to_bf16(tile[i * s.dp + d]);
  }
};

void check_bf16_attention(const char* name, std::initializer_list<memo::ConstTensor> tensors) {
  MEMO_CHECK(bf16_attention_native(), name, ": no bf16 attention here (", bf16_attention_name(),
             ")");
  for (const memo::ConstTensor& t : tensors)
    MEMO_CHECK(t.dtype() == DType::kBF16, name, ": a ", dtype_name(t.dtype()), " tensor ",
               t.shape().str(), " where bf16 is needed");
}

}  // namespace

bool bf16_attention_native() {
  static const bool native = bf16_products_native() && __builtin_cpu_supports("avx512bf16");
  return native;
}

bool bf16_attention_on_amx() {
  if (!amx_permitted()) return false;
  const char* cap = std::getenv("MEMO_CPU_ISA");
  return cap == nullptr || *cap == '\0' || std::string_view(cap) == "amx";
}

std::string amx_refusal() {
  const int err = amx_request();
  if (err <= 0) return {};
  return str(
      "the CPU has AMX tiles but Linux refused them to this process (arch_prctl ",
      "ARCH_REQ_XCOMP_PERM: ", std::strerror(err),
      err == ENOSPC ? ", as a thread's sigaltstack is smaller than the AMX signal frame" : "",
      err == EINVAL ? ", as this kernel predates Linux 5.16" : "", ")");
}

bool bf16_attention_by_default() {
  static const bool on = [] {
    // empty counts as unset, as for MEMO_CPU_ISA
    if (const char* want = std::getenv("MEMO_CPU_BF16_ATTENTION"); want && *want) {
      if (std::string_view(want) != "0" && std::string_view(want) != "1")
        throw Error(str("MEMO_CPU_BF16_ATTENTION=", want, ": expected 1 (on) or 0 (off)"));
      return std::string_view(want) == "1";
    }
    return bf16_attention_native() && (__builtin_cpu_is("amd") || bf16_attention_on_amx());
  }();
  return on;
}

const char* bf16_attention_name() {
  if (!bf16_attention_native()) return "no bf16 attention: it needs AVX512-BF16 and bf16 products";
  return bf16_attention_on_amx() ? "bf16 attention on AMX tiles"
                                 : "bf16 attention on AVX512-BF16 (vdpbf16ps)";
}

// The per-thread tile workspace of this call's policy (Note [AMX tiles for attention]).
int64_t bf16_forward_numel(int64_t dp, int64_t group) {
  return bf16_attention_on_amx() ? Bf16Tiles<true>::forward_numel(dp, group)
                                 : Bf16Tiles<false>::forward_numel(dp, group);
}

int64_t attention_bf16_forward_scratch_numel(int64_t head_dim, int64_t n_heads,
                                             int64_t n_kv_heads) {
  check_forward_scratch_args("attention_bf16_forward_scratch_numel", head_dim, n_heads, n_kv_heads);
  return int64_t(omp_get_max_threads()) *
         bf16_forward_numel(padded_dim16(head_dim), n_heads / n_kv_heads);
}

void attention_bf16_forward(memo::Tensor o, Tensor lse, memo::ConstTensor q, memo::ConstTensor k,
                            memo::ConstTensor v, int64_t batch, int64_t n_heads, int64_t n_kv_heads,
                            Tensor scratch, AttnMask mask) {
  check_bf16_attention("attention_bf16_forward", {o, q, k, v});
  auto run = [&](auto policy) {
    attn::attention_forward<decltype(policy)>(
        "attention_bf16_forward", o.as<bf16>(), lse, q.as<const bf16>(), k.as<const bf16>(),
        v.as<const bf16>(), batch, n_heads, n_kv_heads, scratch, mask);
  };
  if (bf16_attention_on_amx())
    run(Bf16Tiles<true>{});
  else
    run(Bf16Tiles<false>{});
}

int64_t attention_bf16_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                              int64_t n_kv_heads) {
  MEMO_CHECK(seq > 0 && head_dim > 0 && n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0,
             "attention_bf16_backward_scratch_numel: seq ", seq, ", head_dim ", head_dim,
             ", n_heads ", n_heads, ", n_kv_heads ", n_kv_heads,
             " must all be > 0, n_heads a multiple of n_kv_heads");
  const int64_t dp = padded_dim16(head_dim);
  const int64_t G = n_heads / n_kv_heads;
  const int64_t per_thread =
      bf16_attention_on_amx()
          ? Bf16Tiles<true>::backward_numel(dp) + group_scratch_numel<Bf16Tiles<true>>(seq, G, dp)
          : Bf16Tiles<false>::backward_numel(dp) +
                group_scratch_numel<Bf16Tiles<false>>(seq, G, dp);
  return int64_t(omp_get_max_threads()) * per_thread;
}

void attention_bf16_backward(memo::Tensor dq, memo::Tensor dk, memo::Tensor dv,
                             memo::ConstTensor dout, memo::ConstTensor q, memo::ConstTensor k,
                             memo::ConstTensor v, memo::ConstTensor o, ConstTensor lse,
                             int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                             AttnMask mask) {
  check_bf16_attention("attention_bf16_backward", {dq, dk, dv, dout, q, k, v, o});
  auto run = [&](auto policy) {
    attn::attention_backward<decltype(policy)>(
        "attention_bf16_backward", dq.as<bf16>(), dk.as<bf16>(), dv.as<bf16>(),
        dout.as<const bf16>(), q.as<const bf16>(), k.as<const bf16>(), v.as<const bf16>(),
        o.as<const bf16>(), lse, batch, n_heads, n_kv_heads, scratch, mask);
  };
  if (bf16_attention_on_amx())
    run(Bf16Tiles<true>{});
  else
    run(Bf16Tiles<false>{});
}

}  // namespace memo::cpu
