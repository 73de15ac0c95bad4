// The arithmetic of every CUDA kernel, as plain functions of one work item (an element, a row, a
// column or a decoded query), compiled twice: by nvcc into the kernels of the backend (cuda/*.cu)
// (each thread calls one body), and by the host compiler into tests/cuda/bodies_test.cc, which
// runs every item on the CPU and compares with the CPU kernels (cpu/). So the logic of
// each GPU kernel is tested on machines without a GPU; what only a GPU can show (launch shapes,
// streams, cuBLASLt) is tested by tests/gpu/cuda_backend_test.cc where one is present.
// Semantics are those of cpu/kernels.h; row and column sums run in double in index order,
// as the CPU kernels do, so every result is deterministic.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "memo/backend/optim_steps.h"

#if defined(__CUDACC__)
#define MEMO_HD __host__ __device__
#else
#define MEMO_HD
#endif

namespace memo::cuda {

// A 2-D fp32 matrix in device memory: rows of `cols` floats, `ld` floats apart (a 1-D tensor is
// one row). Unit column stride; what every kernel below indexes.
struct Mat {
  float* p = nullptr;
  int64_t rows = 0, cols = 0, ld = 0;
  MEMO_HD float& at(int64_t r, int64_t c) const { return p[r * ld + c]; }
};
struct CMat {
  const float* p = nullptr;
  int64_t rows = 0, cols = 0, ld = 0;
  MEMO_HD const float& at(int64_t r, int64_t c) const { return p[r * ld + c]; }
};

// A target the loss does not count: memo::kIgnoredTarget (core/targets.h; loss.cu checks they
// agree).
inline constexpr int32_t kIgnoredTarget = -2;

MEMO_HD inline float sign_of(float x) { return float((x > 0.0f) - (x < 0.0f)); }

// --- f32 <-> bf16 (core/dtype.h's float_to_bf16 and bf16_to_float, bit for bit) ---
MEMO_HD inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
MEMO_HD inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}
// Round to nearest even; a NaN stays a quiet NaN.
MEMO_HD inline uint16_t to_bf16_bits(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)
    return uint16_t((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
MEMO_HD inline float from_bf16_bits(uint16_t b) { return bits_float(uint32_t(b) << 16); }
MEMO_HD inline float exp_f(float x) { return ::expf(x); }

// Note [bf16 bodies]
// The bodies of the layers' row and elementwise kernels read and write their activations and
// working weights through XMat / XVec, which hold f32 or bf16 elements: a read widens (exact), a
// write rounds to nearest even, once per element written (+= reads, adds in f32, rounds). That is
// what Bf16StorageBackend does around an f32 kernel (widen every input, run, round each output
// once), and each body writes an output element once, so a body over bf16 gives the bits of the
// same body over the widened inputs, rounded: tests/cuda/bodies_test.cc checks it bit for bit.
// So the CUDA backend runs these kernels on bf16 tensors directly (Backend::bf16_elementwise),
// with no widened copies and no conversion scratch.
struct Elem {  // one element, as f32
  void* p;
  bool bf16;
  MEMO_HD operator float() const {
    return bf16 ? from_bf16_bits(*static_cast<const uint16_t*>(p)) : *static_cast<const float*>(p);
  }
  MEMO_HD const Elem& operator=(float v) const {
    if (bf16)
      *static_cast<uint16_t*>(p) = to_bf16_bits(v);
    else
      *static_cast<float*>(p) = v;
    return *this;
  }
  MEMO_HD const Elem& operator=(const Elem& o) const { return *this = float(o); }
  MEMO_HD const Elem& operator+=(float v) const { return *this = float(*this) + v; }
  MEMO_HD const Elem& operator-=(float v) const { return *this = float(*this) - v; }
};
// A 2-D matrix (or one row) of f32 or bf16 elements, rows `ld` elements apart.
struct XMat {
  void* p = nullptr;
  int64_t rows = 0, cols = 0, ld = 0;
  bool bf16 = false;
  XMat() = default;
  MEMO_HD XMat(void* p_, int64_t r, int64_t c, int64_t l, bool b)
      : p(p_), rows(r), cols(c), ld(l), bf16(b) {}
  MEMO_HD XMat(Mat m) : p(m.p), rows(m.rows), cols(m.cols), ld(m.ld) {}  // NOLINT: f32 as it is
  MEMO_HD XMat(CMat m)                                                   // NOLINT
      : p(const_cast<float*>(m.p)), rows(m.rows), cols(m.cols), ld(m.ld) {}
  MEMO_HD void* ptr(int64_t r, int64_t c) const {
    return static_cast<char*>(p) + (r * ld + c) * (bf16 ? 2 : 4);
  }
  MEMO_HD Elem at(int64_t r, int64_t c) const { return {ptr(r, c), bf16}; }
};
// A read-only vector of f32 or bf16 elements (a weight or bias).
struct XVec {
  const void* p = nullptr;
  bool bf16 = false;
  XVec() = default;
  MEMO_HD XVec(const void* p_, bool b) : p(p_), bf16(b) {}
  MEMO_HD XVec(const float* f) : p(f) {}  // NOLINT: f32 as it is
  MEMO_HD float operator[](int64_t i) const {
    return bf16 ? from_bf16_bits(static_cast<const uint16_t*>(p)[i])
                : static_cast<const float*>(p)[i];
  }
};

// Note [Row lanes]
// A row kernel over long rows (RMSNorm, the loss over the vocabulary) runs as a block of
// kRowLanes threads a row: lane l takes columns l, l + lanes, ...; the lanes' partial sums
// (double) or maxima combine in a fixed pairwise tree (row_tree_*), then each lane writes its
// columns. The bodies are functions of (row, lane, lanes): with lanes = 1 they are the one-thread
// row kernels the CPU tests compare bit for bit with the CPU's (sums in index order); with more
// lanes the sums are reassociated, the same way on every call (deterministic), within a few ulp
// of the CPU's. The tests run the lanes and the tree in loops.
inline constexpr int kRowLanes = 256;
// One step of a tree over `lanes` values (a power of two): lane < half takes lane + half's.
MEMO_HD inline void row_tree_sum(double* a, int lane, int half) { a[lane] += a[lane + half]; }
MEMO_HD inline void row_tree_max(float* a, int lane, int half) {
  a[lane] = a[lane + half] > a[lane] ? a[lane + half] : a[lane];
}

// --- RMSNorm: one row t in lanes (forward, dx) or one column c (dw) ---
MEMO_HD inline double rmsnorm_sumsq_part(XMat x, int64_t t, int lane, int lanes) {
  double sum_sq = 0.0;
  for (int64_t c = lane; c < x.cols; c += lanes) sum_sq += double(x.at(t, c)) * double(x.at(t, c));
  return sum_sq;
}
MEMO_HD inline float rmsnorm_inv_rms(double sum_sq, int64_t cols, float eps) {
  return float(1.0 / ::sqrt(sum_sq / double(cols) + double(eps)));
}
MEMO_HD inline void rmsnorm_write_part(XMat y, XMat x, XVec w, float r, int64_t t, int lane,
                                       int lanes) {
  for (int64_t c = lane; c < x.cols; c += lanes) y.at(t, c) = x.at(t, c) * r * w[c];
}
MEMO_HD inline void rmsnorm_forward_row(XMat y, float* inv_rms, XMat x, XVec w, float eps,
                                        int64_t t) {
  const float r = rmsnorm_inv_rms(rmsnorm_sumsq_part(x, t, 0, 1), x.cols, eps);
  inv_rms[t] = r;
  rmsnorm_write_part(y, x, w, r, t, 0, 1);
}
MEMO_HD inline double rmsnorm_dot_part(XMat dy, XMat x, XVec w, int64_t t, int lane, int lanes) {
  double dot = 0.0;
  for (int64_t c = lane; c < x.cols; c += lanes)
    dot += double(w[c]) * double(dy.at(t, c)) * double(x.at(t, c));
  return dot;
}
MEMO_HD inline void rmsnorm_dx_part(XMat dx, XMat dy, XMat x, XVec w, const float* r, double dot,
                                    int64_t t, int lane, int lanes) {
  const double rd = r[t];
  const float coef = float(rd * rd * rd * dot / double(x.cols));
  const float rf = r[t];
  for (int64_t c = lane; c < x.cols; c += lanes)
    dx.at(t, c) += rf * w[c] * dy.at(t, c) - x.at(t, c) * coef;
}
MEMO_HD inline void rmsnorm_backward_row(XMat dx, XMat dy, XMat x, XVec w, const float* r,
                                         int64_t t) {
  rmsnorm_dx_part(dx, dy, x, w, r, rmsnorm_dot_part(dy, x, w, t, 0, 1), t, 0, 1);
}
// Note [Column lanes]
// A column kernel over many token rows (the norms' weight gradients, the bias gradient) runs as
// blocks of kColWidth columns by kColLanes lanes: lane l of a column takes rows l, l + lanes, ...;
// the lanes' partial sums (double) combine in Note [Row lanes]' fixed pairwise tree (row_tree_sum
// over the column's lanes), and the column's sum is added into the gradient once. With lanes = 1
// the bodies are the one-thread column kernels, bit for bit the CPU's (tokens in order); with more
// lanes the sums are reassociated, the same way on every call (deterministic). The first GPU run
// took a thread a column: at 4,096 tokens, 2,048 threads each walking 4,096 rows, 0.85 ms a call.
inline constexpr int kColWidth = 32, kColLanes = 32;
MEMO_HD inline double rmsnorm_dw_part(XMat dy, XMat x, const float* r, int64_t c, int lane,
                                      int lanes) {
  double acc = 0.0;
  for (int64_t t = lane; t < x.rows; t += lanes)
    acc += double(dy.at(t, c)) * double(x.at(t, c)) * double(r[t]);
  return acc;
}
MEMO_HD inline void rmsnorm_dw_col(float* dw, XMat dy, XMat x, const float* r, int64_t c) {
  dw[c] = float(double(dw[c]) + rmsnorm_dw_part(dy, x, r, c, 0, 1));
}

// --- LayerNorm ---
// In lanes (Note [Row lanes]): the sum, then the sum of squares about the mean, then the writes.
MEMO_HD inline double layernorm_sum_part(XMat x, int64_t t, int lane, int lanes) {
  double sum = 0.0;
  for (int64_t c = lane; c < x.cols; c += lanes) sum += double(x.at(t, c));
  return sum;
}
MEMO_HD inline double layernorm_sumsq_part(XMat x, double m, int64_t t, int lane, int lanes) {
  double sum_sq = 0.0;
  for (int64_t c = lane; c < x.cols; c += lanes)
    sum_sq += (double(x.at(t, c)) - m) * (double(x.at(t, c)) - m);
  return sum_sq;
}
MEMO_HD inline void layernorm_write_part(XMat y, XMat x, XVec w, XVec b, double m, double r,
                                         int64_t t, int lane, int lanes) {
  for (int64_t c = lane; c < x.cols; c += lanes)
    y.at(t, c) = float((double(x.at(t, c)) - m) * r) * w[c] + b[c];
}
MEMO_HD inline void layernorm_forward_row(XMat y, float* mean, float* rstd, XMat x, XVec w, XVec b,
                                          float eps, int64_t t) {
  const int64_t C = x.cols;
  const double m = layernorm_sum_part(x, t, 0, 1) / double(C);
  const double r = 1.0 / ::sqrt(layernorm_sumsq_part(x, m, t, 0, 1) / double(C) + double(eps));
  mean[t] = float(m);
  rstd[t] = float(r);
  layernorm_write_part(y, x, w, b, m, r, t, 0, 1);
}
// The backward's two sums (of g = w dy and of g xhat) and the lane's dx.
MEMO_HD inline void layernorm_grad_sums_part(XMat dy, XMat x, XVec w, double m, double r, int64_t t,
                                             int lane, int lanes, double& sum_g, double& sum_gx) {
  sum_g = 0.0;
  sum_gx = 0.0;
  for (int64_t c = lane; c < x.cols; c += lanes) {
    const double g = double(w[c]) * double(dy.at(t, c));
    sum_g += g;
    sum_gx += g * ((double(x.at(t, c)) - m) * r);
  }
}
MEMO_HD inline void layernorm_dx_part(XMat dx, XMat dy, XMat x, XVec w, double m, double r,
                                      double sum_g, double sum_gx, int64_t t, int lane, int lanes) {
  const double mean_g = sum_g / double(x.cols), mean_gx = sum_gx / double(x.cols);
  for (int64_t c = lane; c < x.cols; c += lanes) {
    const double xhat = (double(x.at(t, c)) - m) * r;
    const double g = double(w[c]) * double(dy.at(t, c));
    dx.at(t, c) = float(double(dx.at(t, c)) + r * (g - mean_g - xhat * mean_gx));
  }
}
MEMO_HD inline void layernorm_backward_row(XMat dx, XMat dy, XMat x, XVec w, const float* mean,
                                           const float* rstd, int64_t t) {
  const double m = mean[t], r = rstd[t];
  double sum_g, sum_gx;
  layernorm_grad_sums_part(dy, x, w, m, r, t, 0, 1, sum_g, sum_gx);
  layernorm_dx_part(dx, dy, x, w, m, r, sum_g, sum_gx, t, 0, 1);
}
// The column sum of dy, LayerNorm's db and the bias gradient (Note [Column lanes]).
MEMO_HD inline double bias_backward_part(XMat dy, int64_t c, int lane, int lanes) {
  double acc = 0.0;
  for (int64_t t = lane; t < dy.rows; t += lanes) acc += double(dy.at(t, c));
  return acc;
}
MEMO_HD inline double layernorm_dw_part(XMat dy, XMat x, const float* mean, const float* rstd,
                                        int64_t c, int lane, int lanes) {
  double acc = 0.0;
  for (int64_t t = lane; t < x.rows; t += lanes)
    acc += double(dy.at(t, c)) * ((double(x.at(t, c)) - double(mean[t])) * double(rstd[t]));
  return acc;
}
MEMO_HD inline void layernorm_dwdb_col(float* dw, float* db, XMat dy, XMat x, const float* mean,
                                       const float* rstd, int64_t c) {
  dw[c] = float(double(dw[c]) + layernorm_dw_part(dy, x, mean, rstd, c, 0, 1));
  db[c] = float(double(db[c]) + bias_backward_part(dy, c, 0, 1));
}

// --- RoPE: pair i (< head_dim / 2) of head h of row t, rotated by sign * angle ---
MEMO_HD inline void rope_rotate_pair(XMat x, CMat cos, CMat sin, int64_t head_dim,
                                     int64_t first_row, float sign, int64_t t, int64_t h,
                                     int64_t i) {
  const int64_t pos = (first_row + t) % cos.rows, half = head_dim / 2;
  const Elem x1 = x.at(t, h * head_dim + i);
  const Elem x2 = x.at(t, h * head_dim + half + i);
  const float a = x1, b = x2, s = sign * sin.at(pos, i), co = cos.at(pos, i);
  x1 = a * co - b * s;
  x2 = b * co + a * s;
}

// --- SwiGLU and GELU, one element ---
MEMO_HD inline float swiglu(float g, float u) { return g / (1.0f + exp_f(-g)) * u; }
// dg, du from da (either may alias da: da is read first).
MEMO_HD inline void swiglu_backward_elem(float* dg, float* du, float da, float g, float u) {
  const float e = exp_f(-g);
  const float s = 1.0f / (1.0f + e);
  const float one_minus_s = g >= 0.0f ? e * s : 1.0f - s;
  const float d = da;
  *du = d * g * s;
  *dg = d * u * s * (1.0f + g * one_minus_s);
}
inline constexpr float kGeluA = float(2.0 * 0.79788456080286535588);
inline constexpr float kGeluB = float(2.0 * 0.79788456080286535588 * 0.044715);
inline constexpr float kGeluB3 = float(3.0 * 2.0 * 0.79788456080286535588 * 0.044715);
inline constexpr float kGeluMaxSq = 1e30f;
MEMO_HD inline float gelu(float v) {
  const float z = v * (kGeluA + kGeluB * (v * v));
  return v / (1.0f + exp_f(-z));
}
MEMO_HD inline float gelu_backward(float dy, float v) {
  const float v2 = v * v;
  const float z = v * (kGeluA + kGeluB * v2);
  const float e = exp_f(-z);
  const float s = 1.0f / (1.0f + e);
  const float one_minus_s = v >= 0.0f ? e * s : 1.0f - s;
  const float v2c = v2 < kGeluMaxSq ? v2 : kGeluMaxSq;
  return dy * (s + ((v * s) * one_minus_s) * (kGeluA + kGeluB3 * v2c));
}

// --- bias gradient and embedding backward: one column, tokens in order ---
MEMO_HD inline void bias_backward_col(float* db, XMat dy, int64_t c) {
  db[c] = float(double(db[c]) + bias_backward_part(dy, c, 0, 1));
}
MEMO_HD inline void embedding_backward_col(Mat dwte, XMat dx, const int32_t* tokens, int64_t c) {
  for (int64_t t = 0; t < dx.rows; ++t)
    if (tokens[t] >= 0) dwte.at(tokens[t], c) += dx.at(t, c);  // < 0: another rank's row
}
MEMO_HD inline float embedding_forward_at(XMat wte, const int32_t* tokens, int64_t t, int64_t c) {
  return tokens[t] >= 0 ? wte.at(tokens[t], c) : 0.0f;
}

// --- softmax cross-entropy of row t (dlogits may alias logits; empty dlogits: loss only) ---
// In lanes (Note [Row lanes]): the lane's maximum, its sum of exp(l - m), the loss from the row's
// maximum, sum and target logit (read before any lane writes: dlogits may alias logits), and the
// lane's columns of dlogits (the target's less grad_scale: a second rounding on the CPU, where
// nvcc may fuse the product and the difference into one).
MEMO_HD inline float ce_max_part(CMat logits, int64_t t, int lane, int lanes) {
  float m = -INFINITY;
  for (int64_t c = lane; c < logits.cols; c += lanes) m = logits.at(t, c) > m ? logits.at(t, c) : m;
  return m;
}
MEMO_HD inline double ce_sum_part(CMat logits, int64_t t, float m, int lane, int lanes) {
  double sum = 0.0;
  for (int64_t c = lane; c < logits.cols; c += lanes) sum += double(exp_f(logits.at(t, c) - m));
  return sum;
}
MEMO_HD inline float ce_loss(float m, double sum, float target_logit) {
  return float(double(m) + ::log(sum) - double(target_logit));
}
MEMO_HD inline void ce_grad_part(Mat dlogits, CMat logits, int64_t t, float m, double sum,
                                 int32_t y, float grad_scale, int lane, int lanes) {
  const float scale = float(double(grad_scale) / sum);
  for (int64_t c = lane; c < logits.cols; c += lanes) {
    float g = exp_f(logits.at(t, c) - m) * scale;
    if (c == y) g -= grad_scale;
    dlogits.at(t, c) = g;
  }
}
// Row t of a target the loss does not count (kIgnoredTarget): loss 0 (lane 0 writes it) and a
// zero gradient row (each lane its columns).
MEMO_HD inline void ce_ignored_part(float* losses, Mat dlogits, int64_t t, int lane, int lanes) {
  if (lane == 0) losses[t] = 0.0f;
  for (int64_t c = lane; dlogits.p != nullptr && c < dlogits.cols; c += lanes)
    dlogits.at(t, c) = 0.0f;
}
MEMO_HD inline void cross_entropy_row(float* losses, Mat dlogits, CMat logits,
                                      const int32_t* targets, float grad_scale, int64_t t) {
  const int32_t y = targets[t];
  if (y == kIgnoredTarget) return ce_ignored_part(losses, dlogits, t, 0, 1);
  const float m = ce_max_part(logits, t, 0, 1);
  const double sum = ce_sum_part(logits, t, m, 0, 1);
  losses[t] = ce_loss(m, sum, logits.at(t, y));
  if (dlogits.p == nullptr) return;
  ce_grad_part(dlogits, logits, t, m, sum, y, grad_scale, 0, 1);
}

// --- vocabulary-parallel cross-entropy of row t (cpu/kernels.h); stats [2, T] of this
// rank, then [2 ranks, T] of all: row 2r the maxima, row 2r + 1 the sums; target ids < 0 are
// another rank's (kOtherShard) or not counted (kIgnoredTarget) ---
MEMO_HD inline void vocab_parallel_ce_stats_row(float* stats, float* target_logit, CMat logits,
                                                const int32_t* targets, int64_t t) {
  const int64_t V = logits.cols, T = logits.rows;
  float m = logits.at(t, 0);
  for (int64_t c = 0; c < V; ++c) m = logits.at(t, c) > m ? logits.at(t, c) : m;
  double sum = 0.0;
  for (int64_t c = 0; c < V; ++c) sum += double(exp_f(logits.at(t, c) - m));
  stats[t] = m;
  stats[T + t] = float(sum);
  target_logit[t] = targets[t] >= 0 ? logits.at(t, targets[t]) : 0.0f;
}
MEMO_HD inline void vocab_parallel_ce_row(float* losses, Mat dlogits, CMat logits,
                                          const int32_t* targets, const float* stats, int64_t ranks,
                                          const float* target_logit, float grad_scale, int64_t t) {
  const int64_t V = logits.cols, T = logits.rows;
  if (targets[t] == kIgnoredTarget) return ce_ignored_part(losses, dlogits, t, 0, 1);
  float m = stats[t];
  for (int64_t r = 1; r < ranks; ++r) m = stats[2 * r * T + t] > m ? stats[2 * r * T + t] : m;
  double sum = 0.0;
  for (int64_t r = 0; r < ranks; ++r)
    sum += double(stats[(2 * r + 1) * T + t]) * ::exp(double(stats[2 * r * T + t]) - double(m));
  losses[t] = float(double(m) + ::log(sum) - double(target_logit[t]));
  if (dlogits.p == nullptr) return;
  const float scale = float(double(grad_scale) / sum);
  for (int64_t c = 0; c < V; ++c) dlogits.at(t, c) = exp_f(logits.at(t, c) - m) * scale;
  if (targets[t] >= 0) dlogits.at(t, targets[t]) -= grad_scale;
}

// --- attention (cpu/kernels.h): lse [B, H, S]; o, q [B*S or n, H*D]; k, v [*, Hkv*D].
// The training attention is the chunked schedule (cuda/chunked_attention.h) and the fused
// kernels (cuda/flash_attention.h); here, the merge of two parts and the decode step.
// attention_merge of one (row bs, head h): see cpu/attention_merge.cc.
MEMO_HD inline void attention_merge_item(Mat o, float* lse, CMat o_part, const float* lse_part,
                                         int64_t H, int64_t S, int64_t D, int64_t bs, int64_t h) {
  const int64_t b = bs / S, s = bs % S, li = (b * H + h) * S + s;
  const float l1 = lse[li], l2 = lse_part[li];
  const float mx = l1 > l2 ? l1 : l2;
  if (mx == -INFINITY) return;
  const float e1 = ::expf(l1 - mx), e2 = ::expf(l2 - mx);
  const float l = mx + ::logf(e1 + e2);
  const float w1 = ::expf(l1 - l), w2 = ::expf(l2 - l);
  for (int64_t d = 0; d < D; ++d)
    o.at(bs, h * D + d) = o.at(bs, h * D + d) * w1 + o_part.at(bs, h * D + d) * w2;
  lse[li] = l;
}
// attention_decode of new row i, head h over keys 0 .. first + i (online softmax).
template <int kMaxD>
MEMO_HD inline void attention_decode_item(Mat o, CMat q, CMat k, CMat v, int64_t first, int64_t G,
                                          int64_t D, int64_t i, int64_t h) {
  const float scale = 1.0f / ::sqrtf(float(D));
  const int64_t kh = h / G;
  const float* qi = &q.at(i, h * D);
  float acc[kMaxD];
  for (int64_t d = 0; d < D; ++d) acc[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = 0; j <= first + i; ++j) {
    float s = 0.0f;
    for (int64_t d = 0; d < D; ++d) s += qi[d] * k.at(j, kh * D + d);
    s *= scale;
    const float m_new = s > m ? s : m;
    const float corr = exp_f(m - m_new), p = exp_f(s - m_new);
    l = l * corr + p;
    for (int64_t d = 0; d < D; ++d) acc[d] = acc[d] * corr + p * v.at(j, kh * D + d);
    m = m_new;
  }
  for (int64_t d = 0; d < D; ++d) o.at(i, h * D + d) = acc[d] / l;
}

// --- optimiser updates of element j (cpu/optim_kernels.h); null state: switched off ---
MEMO_HD inline void sgd_elem(float* p, float* buf, const float* g, SgdStep s, int64_t j) {
  const float d = g[j] + s.weight_decay * p[j];
  if (!buf) {
    p[j] -= s.lr * d;
    return;
  }
  buf[j] = s.first ? d : s.momentum * buf[j] + s.keep_grad * d;
  p[j] -= s.lr * (s.nesterov ? d + s.momentum * buf[j] : buf[j]);
}
MEMO_HD inline void signsgd_elem(float* p, float* m, const float* g, SignSgdStep s, int64_t j) {
  if (!m) {
    p[j] = p[j] * s.keep - s.lr * sign_of(g[j]);
    return;
  }
  m[j] = s.momentum * m[j] + s.one_minus_momentum * g[j];
  p[j] = p[j] * s.keep - s.lr * sign_of(m[j]);
}
MEMO_HD inline void adam_elem(float* p, float* m, float* v, const float* g, AdamStep s,
                              bool decoupled, int64_t j) {
  float d = g[j];
  if (decoupled)
    p[j] *= s.keep;
  else
    d += s.weight_decay * p[j];
  m[j] = s.beta1 * m[j] + s.one_minus_beta1 * d;
  v[j] = s.beta2 * v[j] + s.one_minus_beta2 * d * d;
  p[j] -= s.step_size * (m[j] / (::sqrtf(v[j]) / s.bias2_sqrt + s.eps));
}
MEMO_HD inline void adagrad_elem(float* p, float* sum, const float* g, AdagradStep s, int64_t j) {
  const float d = g[j] + s.weight_decay * p[j];
  sum[j] += d * d;
  p[j] -= s.lr * (d / (::sqrtf(sum[j]) + s.eps));
}
MEMO_HD inline void rmsprop_elem(float* p, float* sq, float* ga, float* buf, const float* g,
                                 RmspropStep s, int64_t j) {
  const float d = g[j] + s.weight_decay * p[j];
  sq[j] = s.alpha * sq[j] + s.one_minus_alpha * d * d;
  float var = sq[j];
  if (ga) {
    ga[j] = s.alpha * ga[j] + s.one_minus_alpha * d;
    var = sq[j] - ga[j] * ga[j];
  }
  const float den = ::sqrtf(var) + s.eps;
  if (buf) {
    buf[j] = s.momentum * buf[j] + d / den;
    p[j] -= s.lr * buf[j];
  } else {
    p[j] -= s.lr * (d / den);
  }
}
MEMO_HD inline void lion_elem(float* p, float* m, const float* g, LionStep s, int64_t j) {
  const float c = s.beta1 * m[j] + s.one_minus_beta1 * g[j];
  p[j] = p[j] * s.keep - s.lr * sign_of(c);
  m[j] = s.beta2 * m[j] + s.one_minus_beta2 * g[j];
}

// --- Adafactor (cpu/optim_kernels.cc, the same expressions and orders) ---
// Factored second moment of an [R, C] gradient: row r's and column c's EMA of mean(g^2 + eps1).
MEMO_HD inline void adafactor_row(float* row, const float* g, int64_t C, float b, float rb,
                                  float eps1, int64_t r) {
  double sum = 0.0;
  for (int64_t c = 0; c < C; ++c) sum += double(g[r * C + c] * g[r * C + c] + eps1);
  row[r] = b * row[r] + rb * float(sum / double(C));
}
MEMO_HD inline void adafactor_col(float* col, const float* g, int64_t R, int64_t C, float b,
                                  float rb, float eps1, int64_t c) {
  double sum = 0.0;
  for (int64_t r = 0; r < R; ++r) sum += double(g[r * C + c] * g[r * C + c] + eps1);
  col[c] = b * col[c] + rb * float(sum / double(R));
}
MEMO_HD inline double adafactor_row_mean(const float* row, int64_t R) {
  double sum = 0.0;
  for (int64_t r = 0; r < R; ++r) sum += row[r];
  return sum / double(R);
}
MEMO_HD inline float adafactor_inv_row(float row_r, double row_mean) {
  return float(1.0 / ::sqrt(double(row_r) / row_mean));
}
MEMO_HD inline float adafactor_inv_col(float col_c) { return float(1.0 / ::sqrt(double(col_c))); }
// sum over row r of u^2, u = g ri ci (the matrix update before clipping).
MEMO_HD inline double adafactor_u_row_sq(const float* g, const float* ri, const float* ci,
                                         int64_t C, int64_t r) {
  double sum = 0.0;
  for (int64_t c = 0; c < C; ++c) {
    const float u = g[r * C + c] * ri[r] * ci[c];
    sum += double(u) * u;
  }
  return sum;
}
// The vector case: v's EMA, and chunk k's sum of u^2, u = g / sqrt(v), in the CPU's chunks.
inline constexpr int64_t kAdafactorChunk = 1024;
MEMO_HD inline void adafactor_v(float* v, const float* g, float b, float rb, float eps1,
                                int64_t j) {
  v[j] = b * v[j] + rb * (g[j] * g[j] + eps1);
}
MEMO_HD inline double adafactor_v_chunk_sq(const float* g, const float* v, int64_t n, int64_t k) {
  const int64_t end = (k + 1) * kAdafactorChunk < n ? (k + 1) * kAdafactorChunk : n;
  double sum = 0.0;
  for (int64_t j = k * kAdafactorChunk; j < end; ++j) {
    const float u = g[j] / ::sqrtf(v[j]);
    sum += double(u) * u;
  }
  return sum;
}
// p = keep p - update, update = the scaled u or, with a first moment, m's EMA of it.
MEMO_HD inline void adafactor_apply(float* p, float* m, float update, float b1, float r1,
                                    float keep, int64_t j) {
  if (m) {
    m[j] = b1 * m[j] + r1 * update;
    update = m[j];
  }
  p[j] = p[j] * keep - update;
}

// --- ordered sums: chunk k of kSumChunk elements of x, in index order, in double ---
inline constexpr int64_t kSumChunk = 4096;
MEMO_HD inline double chunk_sum(CMat x, bool squares, int64_t k) {
  const int64_t n = x.rows * x.cols, end = (k + 1) * kSumChunk < n ? (k + 1) * kSumChunk : n;
  double s = 0.0;
  for (int64_t e = k * kSumChunk; e < end; ++e) {
    const double v = x.at(e / x.cols, e % x.cols);
    s += squares ? v * v : v;
  }
  return s;
}
// The noise probe's pass over chunk k of g (cpu/tensor_ops.cc: 2^14 elements, 8 double
// lanes, the same order), pass 0 first, 1 middle, 2 last. Returns the chunk's sum of squares.
inline constexpr int64_t kNoiseProbeChunk = int64_t(1) << 14;
MEMO_HD inline double noise_probe_chunk(float* g, float* sum, int pass, int64_t n, int64_t k) {
  double acc[8] = {};
  const int64_t begin = k * kNoiseProbeChunk;
  const int64_t end = begin + kNoiseProbeChunk < n ? begin + kNoiseProbeChunk : n;
  int64_t i = begin;
  for (; i + 8 <= end; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += double(g[i + j]) * double(g[i + j]);
  for (int j = 0; i < end; ++i, ++j) acc[j] += double(g[i]) * double(g[i]);
  for (i = begin; i < end; ++i) {
    if (pass == 0) {
      sum[i] = g[i];
      g[i] = 0.0f;
    } else if (pass == 1) {
      sum[i] += g[i];
      g[i] = 0.0f;
    } else {
      g[i] += sum[i];
    }
  }
  double s = 0.0;
  for (int j = 0; j < 8; ++j) s += acc[j];
  return s;
}

}  // namespace memo::cuda
