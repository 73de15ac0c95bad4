// memo's fp32 CPU kernels: the signatures every backend implements (memo::cuda mirrors them).
// Arguments: outputs, then saved-for-backward, inputs, weights, then scalars; scratch comes from
// the caller (no allocation, logging or throwing inside loops; checks on entry throw memo::Error).
// Convention: weight gradients accumulate (+=); activation gradients overwrite (=), except where
// a function says otherwise (the residual stream: rmsnorm_backward and layernorm_backward add
// into dx).
// Activations are [T, C] row-major with T = batch * seq tokens (the batch folded into rows);
// token t is position t % seq of sequence t / seq.
// Threads: OpenMP over both cores; every kernel gives bitwise-identical results for a fixed
// thread count (static partitions, fixed reduction order).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "memo/backend/attn_mask.h"
#include "memo/core/tensor.h"
#include "memo/cpu/views.h"

namespace memo::cpu {

// --- matrix product (through the BLAS library chosen at build time, see matmul.cc) ---
// c = alpha * op(a) @ op(b) + beta * c.  op(a): [M, K], op(b): [K, N], c: [M, N].
// a is [M, K] ([K, M] when trans_a), b is [K, N] ([N, K] when trans_b). Row strides from ld().
void matmul(Tensor c, ConstTensor a, ConstTensor b, bool trans_a, bool trans_b, float alpha = 1.0f,
            float beta = 0.0f);
// c = a @ b^T + beta * c for per-token products (a, c: [T, *] token rows; b: [N, K] weights),
// computed as one BLAS call per panel of kTokenPanelRows rows counted from row 0 of the views.
// See Note [Token panels]: a row's bits depend only on its panel, so rebuilding rows
// [r0, r1) with r0 a multiple of kTokenPanelRows reproduces the full product exactly.
inline constexpr int64_t kTokenPanelRows = 128;
void matmul_token_panels(Tensor c, ConstTensor a, ConstTensor b, float beta = 0.0f);
// c = a @ b + beta * c, the same panels as matmul_token_panels, for weights stored [K, N] (GPT-2's
// Conv1D layout; b may be a column slice of a wider weight).
void matmul_token_panels_kn(Tensor c, ConstTensor a, ConstTensor b, float beta = 0.0f);
// Name and version of the BLAS in use, and its kernel ("OpenBLAS 0.3.21 SkylakeX").
const char* blas_name();
// Whether matmul takes bf16 a and b (c f32 or bf16) natively: oneDNN's bf16 kernels on a CPU
// with AVX512-BF16 or AMX, under any MEMO_CPU_ISA cap (Note [bf16 products on the CPU]); and a
// line naming them, or why there are none.
bool bf16_products_native();
// Applies MEMO_CPU_ISA (amx, avx512_bf16, avx512 or avx2: the highest instruction set oneDNN may
// use, to run a newer CPU's fallbacks) or refuses its value; every call above applies it first.
void check_isa_cap();
const char* bf16_products_name();
// matmul with bf16 a and b and an f32 or bf16 c (dtype-erased tensors), accumulating in f32 and
// rounding a bf16 c once; and the token panels of matmul_token_panels (trans_b) or _kn (not).
// Only where bf16_products_native().
void matmul_bf16(memo::Tensor c, memo::ConstTensor a, memo::ConstTensor b, bool trans_a,
                 bool trans_b, float alpha = 1.0f, float beta = 0.0f);
void matmul_bf16_token_panels(memo::Tensor c, memo::ConstTensor a, memo::ConstTensor b,
                              bool trans_b, float beta = 0.0f);
// One line to print at start-up, before any matmul, when the BLAS runs a kernel that does not
// match this CPU's SIMD level (OPENBLAS_CORETYPE forcing an old core: several times slower; or a
// newer one: SIGILL) or fewer threads than the other kernels; empty when all is well.
std::string blas_warning();

// --- RMSNorm ---
// y[t,:] = x[t,:] * r[t] * w,  r[t] = 1 / sqrt(mean_c x[t,c]^2 + eps).  x, y: [T, C]; w: [C]; r:
// [T]
void rmsnorm_forward(Tensor y, Tensor inv_rms, ConstTensor x, ConstTensor w, float eps);
// dx[t,:] += r w*dy - x r^3 mean_c(w dy x)  (adds: x is on the residual stream);  dw += sum_t dy x
// r
void rmsnorm_backward(Tensor dx, Tensor dw, ConstTensor dy, ConstTensor x, ConstTensor w,
                      ConstTensor inv_rms);

// The row and elementwise kernels of this section and the next ones over bf16 activations (X, A)
// and f32 or bf16 working weights (W), statistics and weight gradients f32: the f32 kernels'
// arithmetic on widened elements, each output rounded once (Note [bf16 elementwise on the CPU] in
// cpu/elem.h). Unchecked: Backend checked the shapes. Instantiated for A = bf16, and X and W each
// f32 or bf16 (f32 activations with bf16 weights: a bf16 model decoding in f32).
template <class X, class W>
void rmsnorm_forward(View<X> y, Tensor inv_rms, View<const X> x, View<const W> w, float eps);
template <class X, class W>
void rmsnorm_backward(View<X> dx, Tensor dw, View<const X> dy, View<const X> x, View<const W> w,
                      ConstTensor inv_rms);
template <class X, class W>
void layernorm_forward(View<X> y, Tensor mean, Tensor rstd, View<const X> x, View<const W> w,
                       View<const W> b, float eps);
template <class X, class W>
void layernorm_backward(View<X> dx, Tensor dw, Tensor db, View<const X> dy, View<const X> x,
                        View<const W> w, ConstTensor mean, ConstTensor rstd);
void rope_forward(View<bf16> x, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                  int64_t first_row);
void rope_backward(View<bf16> dx, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                   int64_t first_row);
template <class A>
void swiglu_forward(View<A> a, View<const A> g, View<const A> u);
template <class A>
void swiglu_backward(View<A> dg, View<A> du, View<const A> da, View<const A> g, View<const A> u);
template <class A>
void gelu_forward(View<A> y, View<const A> x);
template <class A>
void gelu_backward(View<A> dx, View<const A> dy, View<const A> x);
template <class A, class W>
void bias_add(View<A> y, View<const W> b);
template <class A>
void bias_backward(Tensor db, View<const A> dy);
template <class A, class W>
void embedding_forward(View<A> x, View<const int32_t> tokens, View<const W> wte);
template <class A>
void embedding_backward(Tensor dwte, View<const A> dx, View<const int32_t> tokens);

// --- LayerNorm (PyTorch semantics: biased variance) ---
// y[t,:] = (x[t,:] - mean[t]) * rstd[t] * w + b,  rstd[t] = 1 / sqrt(var_c x[t,c] + eps), var the
// biased (divide by C) variance.  x, y: [T, C]; w, b: [C]; mean, rstd: [T], saved for the backward.
void layernorm_forward(Tensor y, Tensor mean, Tensor rstd, ConstTensor x, ConstTensor w,
                       ConstTensor b, float eps);
// With xhat = (x - mean) rstd and g = w * dy:
// dx[t,:] += rstd (g - mean_c g - xhat mean_c(g xhat))  (adds: x is on the residual stream);
// dw += sum_t dy xhat;  db += sum_t dy
void layernorm_backward(Tensor dx, Tensor dw, Tensor db, ConstTensor dy, ConstTensor x,
                        ConstTensor w, ConstTensor mean, ConstTensor rstd);

// --- rotary position embedding, Hugging Face Llama convention (rotate_half) ---
// cos, sin: [S, D/2], angle(p, i) = p * theta^(-2i/D), computed in double.
void rope_table(Tensor cos, Tensor sin, std::span<const double> inv_freq, double attention_factor,
                int64_t first_position);
// In place on x: [T, n_heads * D]; row t uses position (first_row + t) % S (S = cos.rows()), so
// a row range [r0, r1) of a [T, ...] tensor passes first_row = r0. For each head and i < D/2:
// (x1, x2) = (x[i], x[i + D/2]) -> (x1 cos - x2 sin, x2 cos + x1 sin).
void rope_forward(Tensor x, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                  int64_t first_row = 0);
// In place on dx: the transposed rotation (by -angle).
void rope_backward(Tensor dx, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                   int64_t first_row = 0);

// --- SwiGLU ---
// a = silu(g) * u = g / (1 + exp(-g)) * u.  g, u, a: [T, F]
void swiglu_forward(Tensor a, ConstTensor g, ConstTensor u);
// dg = da * u * silu'(g), du = da * silu(g);  silu'(g) = s (1 + g (1 - s)), s = sigmoid(g)
void swiglu_backward(Tensor dg, Tensor du, ConstTensor da, ConstTensor g, ConstTensor u);

// --- GELU, the tanh approximation GPT-2 uses ---
// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).  x, y: [T, C]
void gelu_forward(Tensor y, ConstTensor x);
// dx = dy * gelu'(x)  (overwrites; dx may alias dy).  x, dy, dx: [T, C]
void gelu_backward(Tensor dx, ConstTensor dy, ConstTensor x);

// --- bias add: y[t,c] += b[c].  y: [T, C]; b: [C]. Row by row, so any token range is exact ---
void bias_add(Tensor y, ConstTensor b);

// --- bias gradient (of y = ... + b) ---
// db[c] += sum_t dy[t,c], summed in token order in double.  dy: [T, C]; db: [C]
void bias_backward(Tensor db, ConstTensor dy);

// --- token embedding ---
// x[t,:] = wte[tokens[t],:].  x: [T, C]; wte: [V, C]. Throws DataError naming t on an id >= V.
// A kOtherShard id (backend/checks.h: the row is another tensor-parallel rank's) gives a zero row.
void embedding_forward(Tensor x, View<const int32_t> tokens, ConstTensor wte);
// dwte[tokens[t],:] += dx[t,:], summed in token order for each row (deterministic); kOtherShard
// ids add nothing.
void embedding_backward(Tensor dwte, ConstTensor dx, View<const int32_t> tokens);

// --- softmax cross-entropy ---
// losses[t] = logsumexp(logits[t,:]) - logits[t, targets[t]];  logits: [T, V]; losses: [T].
// When dlogits is non-empty: dlogits[t,:] = (softmax(logits[t,:]) - onehot(targets[t])) *
// grad_scale (dlogits may alias logits). A kIgnoredTarget target (backend/checks.h) gives
// losses[t] = 0 and a zero dlogits row. Throws DataError on a target outside [0, V).
void cross_entropy(Tensor losses, Tensor dlogits, ConstTensor logits, View<const int32_t> targets,
                   float grad_scale);
// The same over a vocabulary split into t parts, one per tensor-parallel rank (Note
// [Vocabulary-parallel loss] in model/model.cc). Each rank first computes, over its logits [T, V/t]
// and its targets (relative to its first row, kOtherShard where another rank holds the target):
//   stats[0, t] = max_c logits[t, c], stats[1, t] = sum_c exp(logits[t, c] - stats[0, t]) (added
//   in double), target_logit[t] = logits[t, targets[t]] (0 for kOtherShard and kIgnoredTarget).
void vocab_parallel_ce_stats(Tensor stats, Tensor target_logit, ConstTensor logits,
                             View<const int32_t> targets);
// Then, with stats [2 t, T] the ranks' stats in rank order and target_logit summed over them:
// m = max_r m_r, s = sum_r s_r exp(m_r - m) (in double, in rank order), losses[t] = m + log(s) -
// target_logit[t], and when dlogits is non-empty dlogits[t, c] = (exp(logits[t, c] - m) / s -
// [c == targets[t]]) * grad_scale (dlogits may alias logits); a kIgnoredTarget row: loss 0 and a
// zero gradient row.
void vocab_parallel_ce(Tensor losses, Tensor dlogits, ConstTensor logits,
                       View<const int32_t> targets, ConstTensor stats, ConstTensor target_logit,
                       float grad_scale);

// --- causal self-attention with grouped-query heads, FlashAttention-2 tiling ---
// q: [B*S, H*D]; k, v: [B*S, Hkv*D]; o: [B*S, H*D]; lse: [B, H, S] (natural log, of scaled scores).
// o[b,s,h] = sum_{j<=s} softmax_j(q.k_j / sqrt(D)) v_j, with kv head h / (H / Hkv). The S x S
// score matrix is never stored: tiles of at most kAttnTile x kAttnTile live in scratch. With
// AttnMask::kFull the sums run over every key j < S (q and k are then two different chunks of the
// same length, the keys' chunk wholly before the queries'). The tile products run on 512-bit
// vectors where the CPU has AVX-512 (unless MEMO_CPU_ISA=avx2), with the same bits as on 256
// (Note [Wide tile products] in attention.cc).
inline constexpr int64_t kAttnTile = 64;
// The scratch holds the tiles of one item per thread: the key and value tiles of a kv head and
// the query-side tiles of the heads that share them (up to n_heads / n_kv_heads).
int64_t attention_forward_scratch_numel(int64_t head_dim, int64_t n_heads, int64_t n_kv_heads);
void attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k, ConstTensor v,
                       int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                       AttnMask mask = AttnMask::kCausal);
// Recomputes scores tile by tile from q, k and lse. dq, dk, dv overwrite. The scratch is the
// threads' tiles, plus up to 32 MiB a thread that depends on seq (Note [Group scratch]).
int64_t attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                         int64_t n_kv_heads);
void attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout, ConstTensor q,
                        ConstTensor k, ConstTensor v, ConstTensor o, ConstTensor lse, int64_t batch,
                        int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                        AttnMask mask = AttnMask::kCausal);
// The same over bf16 q, k, v, o, dO, dq, dk, dv (lse and scratch f32) on a CPU with AVX512-BF16:
// tile products on AMX tiles where the CPU has them (Note [AMX tiles for attention]), else on
// vdpbf16ps; P and dS rounded to bf16 before their products, each output rounded once (Note [bf16
// attention on the CPU] in attention_bf16.cc). Only where bf16_attention_native():
// bf16_products_native() and the CPU has AVX512-BF16 (MEMO_CPU_ISA=avx512|avx2 turns it off).
bool bf16_attention_native();
const char* bf16_attention_name();
// Whether this call's bf16 attention runs on AMX tiles: the CPU has them, Linux granted them, and
// MEMO_CPU_ISA (read at each call) is unset or amx. The scratch sizes below follow it.
bool bf16_attention_on_amx();
// Why a CPU with AMX runs without it: Linux refused the tiles to this process (a sigaltstack
// smaller than the AMX signal frame, a kernel before 5.16), with the errno; empty where the tiles
// were granted or the CPU has none. oneDNN's bf16 products then fall back too.
std::string amx_refusal();
// Whether a CPU backend runs bf16 attention natively unless told (CpuOptions::bf16_attention):
// MEMO_CPU_BF16_ATTENTION=1 or 0 when set (anything else: Error), else where it is native and
// measured faster than the f32 kernels (bench/RESULTS.md): on AMX tiles (2.07-2.53x fwd + bwd on
// a Xeon, head dims 32-128) and on AMD's AVX512-BF16 cores (1.30-1.66x on a Zen 5), not on an
// Intel core's vdpbf16ps (0.77-0.85x on the same Xeon).
bool bf16_attention_by_default();
int64_t attention_bf16_forward_scratch_numel(int64_t head_dim, int64_t n_heads, int64_t n_kv_heads);
void attention_bf16_forward(memo::Tensor o, Tensor lse, memo::ConstTensor q, memo::ConstTensor k,
                            memo::ConstTensor v, int64_t batch, int64_t n_heads, int64_t n_kv_heads,
                            Tensor scratch, AttnMask mask = AttnMask::kCausal);
int64_t attention_bf16_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                              int64_t n_kv_heads);
void attention_bf16_backward(memo::Tensor dq, memo::Tensor dk, memo::Tensor dv,
                             memo::ConstTensor dout, memo::ConstTensor q, memo::ConstTensor k,
                             memo::ConstTensor v, memo::ConstTensor o, ConstTensor lse,
                             int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                             AttnMask mask = AttnMask::kCausal);
// Merges a second attention over other keys into (o, lse): with l = log(e^lse + e^lse_part),
// o = o e^(lse - l) + o_part e^(lse_part - l), lse = l. o, o_part: [B*S, H*D]; lse, lse_part:
// [B, H, S]. The partial outputs of a query block over disjoint key blocks merge into the output
// over their union (FlashAttention's online softmax across ranks, ring attention).
void attention_merge(Tensor o, Tensor lse, ConstTensor o_part, ConstTensor lse_part);

// --- causal attention of new rows over a key/value cache (generation) ---
// q, o: [n, H*D], the rows at positions first .. first+n-1; k, v: [first + n, Hkv*D], every key
// and value so far. o[i, h] = sum_{j <= first+i} softmax_j(q_i . k_j / sqrt(D)) v_j. Scratch:
// attention_decode_scratch_numel(first + n) floats.
int64_t attention_decode_scratch_numel(int64_t keys);
void attention_decode(Tensor o, ConstTensor q, ConstTensor k, ConstTensor v, int64_t first,
                      int64_t n_heads, int64_t n_kv_heads, Tensor scratch);

}  // namespace memo::cpu
