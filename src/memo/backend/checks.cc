#include "memo/backend/checks.h"

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "memo/backend/view_checks.h"

namespace memo {
namespace {

void check_rope(const char* op, const Tensor& x, const ConstTensor& cos, const ConstTensor& sin,
                int64_t head_dim) {
  MEMO_CHECK(head_dim > 0 && head_dim % 2 == 0 && is_matrix(x) && x.cols() % head_dim == 0 &&
                 is_matrix(cos) && cos.rows() > 0 && cos.cols() == head_dim / 2 &&
                 is_matrix(sin, cos.rows(), cos.cols()),
             op, ": x ", x.shape(), " cos ", cos.shape(), " sin ", sin.shape(), " head_dim ",
             head_dim, " (need x: [T, n_heads * D], cos and sin: [S, D/2], D even)");
}

AttnDims check_attention(const char* fn, const ConstTensor& q, const ConstTensor& k,
                         const ConstTensor& v, const ConstTensor& o, const ConstTensor& lse,
                         int64_t batch, int64_t n_heads, int64_t n_kv_heads) {
  MEMO_CHECK(batch > 0 && n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0, fn,
             ": batch ", batch, ", n_heads ", n_heads, ", n_kv_heads ", n_kv_heads,
             " (all > 0, n_heads a multiple of n_kv_heads)");
  MEMO_CHECK(q.ndim() == 2 && q.rows() > 0 && q.rows() % batch == 0 && q.cols() > 0 &&
                 q.cols() % n_heads == 0,
             fn, ": q ", q.shape(), " must be [B*S, H*D] with batch ", batch, ", n_heads ",
             n_heads);
  const int64_t S = q.rows() / batch, D = q.cols() / n_heads;
  MEMO_CHECK(k.shape() == Shape({q.rows(), n_kv_heads * D}) && same_shape(k, v), fn, ": k ",
             k.shape(), " v ", v.shape(), " must be [", q.rows(), ", ", n_kv_heads * D, "]");
  MEMO_CHECK(same_shape(o, q), fn, ": o ", o.shape(), " must match q ", q.shape());
  MEMO_CHECK(lse.shape() == Shape({batch, n_heads, S}), fn, ": lse ", lse.shape(), " must be [",
             batch, ", ", n_heads, ", ", S, "]");
  for (const ConstTensor* t : {&q, &k, &v, &o})
    MEMO_CHECK(t->stride()[1] == 1, fn, ": tensor ", t->shape(), " needs unit column stride");
  return {batch, S, n_heads, n_kv_heads, n_heads / n_kv_heads, D};
}

}  // namespace

void check_rmsnorm_forward(Tensor y, Tensor inv_rms, ConstTensor x, ConstTensor w, float eps) {
  const int64_t T = x.rows(), C = x.cols();
  MEMO_CHECK(is_matrix(x) && is_matrix(y, T, C) && is_vector(w, C) && is_vector(inv_rms, T),
             "rmsnorm_forward: x ", x.shape(), " y ", y.shape(), " w ", w.shape(), " inv_rms ",
             inv_rms.shape());
  MEMO_CHECK(C > 0 && eps >= 0.0f, "rmsnorm_forward: C ", C, " eps ", eps);
}

void check_rmsnorm_backward(Tensor dx, Tensor dw, ConstTensor dy, ConstTensor x, ConstTensor w,
                            ConstTensor inv_rms) {
  const int64_t T = x.rows(), C = x.cols();
  MEMO_CHECK(is_matrix(x) && is_matrix(dx, T, C) && is_matrix(dy, T, C) && is_vector(w, C) &&
                 is_vector(dw, C) && is_vector(inv_rms, T),
             "rmsnorm_backward: dx ", dx.shape(), " dw ", dw.shape(), " dy ", dy.shape(), " x ",
             x.shape(), " w ", w.shape(), " inv_rms ", inv_rms.shape());
  MEMO_CHECK(C > 0, "rmsnorm_backward: C ", C);
}

void check_layernorm_forward(Tensor y, Tensor mean, Tensor rstd, ConstTensor x, ConstTensor w,
                             ConstTensor b, float eps) {
  const int64_t T = x.rows(), C = x.cols();
  MEMO_CHECK(is_matrix(x) && is_matrix(y, T, C) && is_vector(w, C) && is_vector(b, C) &&
                 is_vector(mean, T) && is_vector(rstd, T),
             "layernorm_forward: x ", x.shape(), " y ", y.shape(), " w ", w.shape(), " b ",
             b.shape(), " mean ", mean.shape(), " rstd ", rstd.shape());
  MEMO_CHECK(C > 0 && eps >= 0.0f, "layernorm_forward: C ", C, " eps ", eps);
}

void check_layernorm_backward(Tensor dx, Tensor dw, Tensor db, ConstTensor dy, ConstTensor x,
                              ConstTensor w, ConstTensor mean, ConstTensor rstd) {
  const int64_t T = x.rows(), C = x.cols();
  MEMO_CHECK(is_matrix(x) && is_matrix(dx, T, C) && is_matrix(dy, T, C) && is_vector(w, C) &&
                 is_vector(dw, C) && is_vector(db, C) && is_vector(mean, T) && is_vector(rstd, T),
             "layernorm_backward: dx ", dx.shape(), " dw ", dw.shape(), " db ", db.shape(), " dy ",
             dy.shape(), " x ", x.shape(), " w ", w.shape(), " mean ", mean.shape(), " rstd ",
             rstd.shape());
  MEMO_CHECK(C > 0, "layernorm_backward: C ", C);
}

void check_rope_table(Tensor cos, Tensor sin, std::span<const double> inv_freq,
                      double attention_factor, int64_t first_position) {
  MEMO_CHECK(!inv_freq.empty() && is_matrix(cos) && cos.cols() == int64_t(inv_freq.size()) &&
                 is_matrix(sin, cos.rows(), cos.cols()) && attention_factor > 0.0 &&
                 first_position >= 0,
             "rope_table: cos ", cos.shape(), " sin ", sin.shape(), " ", inv_freq.size(),
             " frequencies, attention factor ", attention_factor, ", first position ",
             first_position, " (need [S, D/2] tables, D/2 frequencies, a positive factor)");
}

void check_rope_forward(Tensor x, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                        int64_t first_row) {
  check_rope("rope_forward", x, cos, sin, head_dim);
  MEMO_CHECK(first_row >= 0, "rope_forward: first_row ", first_row, " must be >= 0");
}

void check_rope_backward(Tensor dx, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                         int64_t first_row) {
  check_rope("rope_backward", dx, cos, sin, head_dim);
  MEMO_CHECK(first_row >= 0, "rope_backward: first_row ", first_row, " must be >= 0");
}

void check_swiglu_forward(Tensor a, ConstTensor g, ConstTensor u) {
  const int64_t T = g.rows(), F = g.cols();
  MEMO_CHECK(is_matrix(g) && is_matrix(u, T, F) && is_matrix(a, T, F), "swiglu_forward: a ",
             a.shape(), " g ", g.shape(), " u ", u.shape());
}

void check_swiglu_backward(Tensor dg, Tensor du, ConstTensor da, ConstTensor g, ConstTensor u) {
  const int64_t T = g.rows(), F = g.cols();
  MEMO_CHECK(is_matrix(g) && is_matrix(u, T, F) && is_matrix(da, T, F) && is_matrix(dg, T, F) &&
                 is_matrix(du, T, F),
             "swiglu_backward: dg ", dg.shape(), " du ", du.shape(), " da ", da.shape(), " g ",
             g.shape(), " u ", u.shape());
}

void check_gelu_forward(Tensor y, ConstTensor x) {
  const int64_t T = x.rows(), C = x.cols();
  MEMO_CHECK(is_matrix(x) && is_matrix(y, T, C), "gelu_forward: y ", y.shape(), " x ", x.shape());
}

void check_gelu_backward(Tensor dx, ConstTensor dy, ConstTensor x) {
  const int64_t T = x.rows(), C = x.cols();
  MEMO_CHECK(is_matrix(x) && is_matrix(dy, T, C) && is_matrix(dx, T, C), "gelu_backward: dx ",
             dx.shape(), " dy ", dy.shape(), " x ", x.shape());
}

void check_bias_backward(Tensor db, ConstTensor dy) {
  const int64_t C = dy.cols();
  MEMO_CHECK(is_matrix(dy) && is_vector(db, C), "bias_backward: db ", db.shape(), " dy ",
             dy.shape());
}

void check_bias_add(Tensor y, ConstTensor b) {
  const int64_t C = y.cols();
  MEMO_CHECK(is_matrix(y) && is_vector(b, C), "bias_add: y ", y.shape(), " b ", b.shape());
}

namespace {

// The first position of ids whose id is outside [0, V) and not one of the markers allowed
// (kIgnoredTarget, kOtherShard), or ids.numel(). The test is branch-free over blocks, so the
// compiler vectorises it; a block with a bad id is scanned again for the first one. (A plan's
// longest-sequence search checks tens of millions of ids per trace.)
template <bool kAllowIgnored, bool kAllowOther>
int64_t first_id_outside(View<const int32_t> ids, int64_t V) {
  // negative ids wrap to at least 2^31 as unsigned, past any bound
  const uint32_t bound = uint32_t(std::clamp<int64_t>(V, 0, int64_t(1) << 31));
  auto bad = [bound](int32_t id) -> unsigned {
    return unsigned(uint32_t(id) >= bound) & unsigned(!(kAllowIgnored && id == kIgnoredTarget)) &
           unsigned(!(kAllowOther && id == kOtherShard));
  };
  const int32_t* p = ids.data();
  const int64_t n = ids.numel();
  constexpr int64_t kBlock = 4096;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    unsigned any = 0;
    for (int64_t t = b; t < e; ++t) any |= bad(p[t]);
    if (any)
      for (int64_t t = b; t < e; ++t)
        if (bad(p[t])) return t;
  }
  return n;
}

[[noreturn]] void throw_id_outside(const char* op, const char* what, int32_t id, int64_t t,
                                   int64_t V) {
  throw DataError(str(op, ": ", what, " id ", id, " at position ", t,
                      " is outside the vocabulary [0, ", V, ")"));
}

}  // namespace

void check_token_ids(const char* op, const char* what, View<const int32_t> ids, int64_t V) {
  const int64_t t = first_id_outside<false, false>(ids, V);
  if (t < ids.numel()) throw_id_outside(op, what, ids.data()[t], t, V);
}

void check_target_ids(const char* op, View<const int32_t> targets, int64_t V) {
  const int64_t t = first_id_outside<true, false>(targets, V);
  if (t < targets.numel()) throw_id_outside(op, "target", targets.data()[t], t, V);
}

namespace {

// ids in [0, V) or kOtherShard (targets: or kIgnoredTarget)
void check_shard_ids(const char* op, const char* what, View<const int32_t> ids, int64_t V) {
  const int64_t t = std::string_view(what) == "target" ? first_id_outside<true, true>(ids, V)
                                                       : first_id_outside<false, true>(ids, V);
  if (t < ids.numel()) throw_id_outside(op, what, ids.data()[t], t, V);
}

}  // namespace

void check_vocab_parallel_ce_stats(Tensor stats, Tensor target_logit, ConstTensor logits,
                                   View<const int32_t> targets, bool ids_on_host) {
  const int64_t T = logits.rows(), V = logits.cols();
  MEMO_CHECK(is_matrix(logits) && V > 0 && is_matrix(stats, 2, T) && stats.contiguous() &&
                 is_vector(target_logit, T) && is_vector(targets, T),
             "vocab_parallel_ce_stats: stats ", stats.shape(), " target_logit ",
             target_logit.shape(), " logits ", logits.shape(), " targets ", targets.shape());
  if (ids_on_host) check_shard_ids("vocab_parallel_ce_stats", "target", targets, V);
}

void check_vocab_parallel_ce(Tensor losses, Tensor dlogits, ConstTensor logits,
                             View<const int32_t> targets, ConstTensor stats,
                             ConstTensor target_logit, bool ids_on_host) {
  const int64_t T = logits.rows(), V = logits.cols();
  const bool want_grad = !dlogits.empty();
  MEMO_CHECK(is_matrix(logits) && V > 0 && is_vector(losses, T) && is_vector(targets, T) &&
                 (!want_grad || is_matrix(dlogits, T, V)) && is_matrix(stats) &&
                 stats.cols() == T && stats.rows() % 2 == 0 && stats.rows() > 0 &&
                 stats.contiguous() && is_vector(target_logit, T),
             "vocab_parallel_ce: losses ", losses.shape(), " dlogits ", dlogits.shape(), " logits ",
             logits.shape(), " targets ", targets.shape(), " stats ", stats.shape(),
             " target_logit ", target_logit.shape());
  if (ids_on_host) check_shard_ids("vocab_parallel_ce", "target", targets, V);
}

void check_embedding_forward(Tensor x, View<const int32_t> tokens, ConstTensor wte,
                             bool ids_on_host) {
  const int64_t T = x.rows(), C = x.cols();
  MEMO_CHECK(is_matrix(x) && is_matrix(wte) && wte.cols() == C && is_vector(tokens, T),
             "embedding_forward: x ", x.shape(), " tokens ", tokens.shape(), " wte ", wte.shape());
  if (ids_on_host) check_shard_ids("embedding_forward", "token", tokens, wte.rows());
}

void check_embedding_backward(Tensor dwte, ConstTensor dx, View<const int32_t> tokens,
                              bool ids_on_host) {
  const int64_t T = dx.rows(), C = dx.cols();
  MEMO_CHECK(is_matrix(dx) && is_matrix(dwte) && dwte.cols() == C && is_vector(tokens, T),
             "embedding_backward: dwte ", dwte.shape(), " dx ", dx.shape(), " tokens ",
             tokens.shape());
  if (ids_on_host) check_shard_ids("embedding_backward", "token", tokens, dwte.rows());
}

void check_cross_entropy(Tensor losses, Tensor dlogits, ConstTensor logits,
                         View<const int32_t> targets, float grad_scale, bool ids_on_host) {
  const int64_t T = logits.rows(), V = logits.cols();
  const bool want_grad = !dlogits.empty();
  MEMO_CHECK(is_matrix(logits) && V > 0 && is_vector(losses, T) && is_vector(targets, T) &&
                 (!want_grad || is_matrix(dlogits, T, V)),
             "cross_entropy: losses ", losses.shape(), " dlogits ", dlogits.shape(), " logits ",
             logits.shape(), " targets ", targets.shape());
  if (ids_on_host) check_target_ids("cross_entropy", targets, V);
}

void check_matmul(Tensor c, ConstTensor a, ConstTensor b, bool trans_a, bool trans_b, float alpha,
                  float beta) {
  const int64_t M = c.rows(), N = c.cols();
  const int64_t K = trans_a ? a.rows() : a.cols();
  const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  MEMO_CHECK(is_matrix(c) && is_matrix(a, a_rows, a_cols) && is_matrix(b, b_rows, b_cols),
             "matmul: c ", c.shape(), " = a", trans_a ? "^T " : " ", a.shape(), " @ b",
             trans_b ? "^T " : " ", b.shape(), " (2-D row-major views, contiguous rows)");
}

void check_copy(Tensor dst, ConstTensor src) {
  MEMO_CHECK(dst.numel() == src.numel(), "copy: dst ", dst.shape(), " src ", src.shape());
}

void check_convert(Tensor dst, ConstTensor src) {
  MEMO_CHECK(dst.contiguous() && src.contiguous() && dst.numel() == src.numel(), "convert: dst ",
             dst.shape(), " src ", src.shape(), " must be contiguous with one element count");
  for (DType t : {dst.dtype(), src.dtype()})
    MEMO_CHECK(t == DType::kF32 || t == DType::kBF16, "convert: ", dtype_name(src.dtype()), " to ",
               dtype_name(dst.dtype()), ": memo converts between f32 and bf16");
}

void check_fill(Tensor dst, float value) {
  MEMO_CHECK(dst.contiguous(), "fill: view ", dst.shape(), " must be contiguous");
}

void check_scale(Tensor x, float factor) {
  MEMO_CHECK(x.contiguous(), "scale: view ", x.shape(), " must be contiguous");
}

void check_add_into(Tensor dst, ConstTensor src) {
  MEMO_CHECK(dst.contiguous() && src.contiguous() && dst.numel() == src.numel(), "add_into: dst ",
             dst.shape(), " src ", src.shape());
}

void check_sum(ConstTensor x) {
  MEMO_CHECK(x.contiguous(), "sum: view ", x.shape(), " must be contiguous");
}

void check_sum_squares(ConstTensor x) {
  MEMO_CHECK(x.contiguous(), "sum_squares: view ", x.shape(), " must be contiguous");
}

AttnDims attention_dims(ConstTensor q, int64_t batch, int64_t n_heads, int64_t n_kv_heads) {
  return {batch, q.rows() / batch, n_heads, n_kv_heads, n_heads / n_kv_heads, q.cols() / n_heads};
}

AttnDims check_attention_forward(ConstTensor o, ConstTensor lse, ConstTensor q, ConstTensor k,
                                 ConstTensor v, int64_t batch, int64_t n_heads,
                                 int64_t n_kv_heads) {
  return check_attention("attention_forward", q, k, v, o, lse, batch, n_heads, n_kv_heads);
}

AttnDims check_attention_backward(ConstTensor dq, ConstTensor dk, ConstTensor dv, ConstTensor dout,
                                  ConstTensor q, ConstTensor k, ConstTensor v, ConstTensor o,
                                  ConstTensor lse, int64_t batch, int64_t n_heads,
                                  int64_t n_kv_heads) {
  const AttnDims s =
      check_attention("attention_backward", q, k, v, o, lse, batch, n_heads, n_kv_heads);
  MEMO_CHECK(same_shape(dq, q) && same_shape(dout, q) && same_shape(dk, k) && same_shape(dv, k) &&
                 dq.stride()[1] == 1 && dout.stride()[1] == 1 && dk.stride()[1] == 1 &&
                 dv.stride()[1] == 1,
             "attention_backward: dq ", dq.shape(), " and dout ", dout.shape(), " must match q ",
             q.shape(), "; dk ", dk.shape(), " and dv ", dv.shape(), " must match k ", k.shape(),
             "; all with unit column stride");
  return s;
}

void check_attention_mask(const char* op, const AttnMask& mask, const AttnDims& d, bool on_host) {
  const View<const int32_t>& ks = mask.key_start;
  if (ks.empty()) return;
  MEMO_CHECK(is_vector(ks, d.B * d.S), op, ": key_start ", ks.shape(), " must be a vector of ", d.B,
             " x ", d.S, " rows");
  if (!on_host) return;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t i = 0; i < d.S; ++i) {
      const int64_t start = ks.data()[b * d.S + i];
      MEMO_CHECK(i == 0 || start >= ks.data()[b * d.S + i - 1], op, ": key_start of row ", i,
                 " of sequence ", b, " is ", start, ", below the row before's ",
                 ks.data()[b * d.S + i - 1], " (it must not decrease along a sequence)");
      MEMO_CHECK(!mask.causal || start <= i, op, ": key_start of row ", i, " of sequence ", b,
                 " is ", start, ", after the row itself (a causal row sees itself)");
    }
}

void check_attention_merge(ConstTensor o, ConstTensor lse, ConstTensor o_part,
                           ConstTensor lse_part) {
  MEMO_CHECK(o.ndim() == 2 && lse.ndim() == 3 && same_shape(o, o_part) &&
                 same_shape(lse, lse_part) && o.contiguous() && o_part.contiguous() &&
                 lse.contiguous() && lse_part.contiguous() && o.rows() == lse.dim(0) * lse.dim(2) &&
                 o.cols() % lse.dim(1) == 0,
             "attention_merge: o ", o.shape(), " and o_part ", o_part.shape(),
             " must be one [B*S, H*D] shape, lse ", lse.shape(), " and lse_part ", lse_part.shape(),
             " one [B, H, S] shape, all contiguous");
}

void check_optimizer_update(const char* op, ConstTensor p, ConstTensor g,
                            std::initializer_list<ConstTensor> state) {
  MEMO_CHECK(p.contiguous() && g.contiguous() && p.numel() == g.numel(), op, ": p ", p.shape(),
             " and g ", g.shape(), " must be contiguous and of one length");
  for (const ConstTensor& t : state)
    MEMO_CHECK(t.empty() || (t.contiguous() && t.numel() == p.numel()), op, ": state ", t.shape(),
               " must be empty or contiguous like p ", p.shape());
}

void check_attention_decode(ConstTensor o, ConstTensor q, ConstTensor k, ConstTensor v,
                            int64_t first, int64_t n_heads, int64_t n_kv_heads) {
  MEMO_CHECK(n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0 && first >= 0 &&
                 q.ndim() == 2 && q.rows() > 0 && q.cols() % n_heads == 0,
             "attention_decode: q ", q.shape(), ", first ", first, ", n_heads ", n_heads,
             ", n_kv_heads ", n_kv_heads);
  const int64_t D = q.cols() / n_heads;
  MEMO_CHECK(same_shape(o, q) && k.shape() == Shape({first + q.rows(), n_kv_heads * D}) &&
                 same_shape(k, v),
             "attention_decode: o ", o.shape(), " q ", q.shape(), " k ", k.shape(), " v ",
             v.shape(), " (k and v: [first + n, Hkv*D] = [", first + q.rows(), ", ", n_kv_heads * D,
             "])");
  for (const ConstTensor* t : {&o, &q, &k, &v})
    MEMO_CHECK(t->stride()[1] == 1, "attention_decode: tensor ", t->shape(),
               " needs unit column stride");
}

void check_scratch(const char* op, ConstTensor scratch, int64_t needed) {
  MEMO_CHECK(scratch.contiguous() && scratch.numel() >= needed, op, ": scratch has ",
             scratch.numel(), " floats, needs ", needed);
}

}  // namespace memo
