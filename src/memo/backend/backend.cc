// The checked entry points of Backend (Note [Checked entry points] in backend.h): each runs the
// entry checks of checks.h once, then the implementation's do_<kernel>.
#include "memo/backend/backend.h"

#include <algorithm>
#include <cmath>

#include "memo/backend/checks.h"

namespace memo {

void Backend::matmul(Tensor c, ConstTensor a, ConstTensor b, bool trans_a, bool trans_b,
                     float alpha, float beta) {
  check_matmul(c, a, b, trans_a, trans_b, alpha, beta);
  do_matmul(c, a, b, trans_a, trans_b, alpha, beta);
}
// The panels are row slices of one product: checking the whole product checks every panel.
void Backend::matmul_token_panels(Tensor c, ConstTensor a, ConstTensor b, float beta) {
  check_matmul(c, a, b, false, true, 1.0f, beta);
  do_matmul_token_panels(c, a, b, beta);
}
void Backend::matmul_token_panels_kn(Tensor c, ConstTensor a, ConstTensor b, float beta) {
  check_matmul(c, a, b, false, false, 1.0f, beta);
  do_matmul_token_panels_kn(c, a, b, beta);
}
void Backend::rmsnorm_forward(Tensor y, Tensor inv_rms, ConstTensor x, ConstTensor w, float eps) {
  check_rmsnorm_forward(y, inv_rms, x, w, eps);
  do_rmsnorm_forward(y, inv_rms, x, w, eps);
}
void Backend::rmsnorm_backward(Tensor dx, Tensor dw, ConstTensor dy, ConstTensor x, ConstTensor w,
                               ConstTensor inv_rms) {
  check_rmsnorm_backward(dx, dw, dy, x, w, inv_rms);
  do_rmsnorm_backward(dx, dw, dy, x, w, inv_rms);
}
void Backend::layernorm_forward(Tensor y, Tensor mean, Tensor rstd, ConstTensor x, ConstTensor w,
                                ConstTensor b, float eps) {
  check_layernorm_forward(y, mean, rstd, x, w, b, eps);
  do_layernorm_forward(y, mean, rstd, x, w, b, eps);
}
void Backend::layernorm_backward(Tensor dx, Tensor dw, Tensor db, ConstTensor dy, ConstTensor x,
                                 ConstTensor w, ConstTensor mean, ConstTensor rstd) {
  check_layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
  do_layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
}
std::vector<double> rope_inv_freq(int64_t head_dim, double theta) {
  std::vector<double> w(size_t(std::max<int64_t>(head_dim / 2, 0)));
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::pow(theta, -2.0 * double(i) / double(head_dim));
  return w;
}
void Backend::rope_table(Tensor cos, Tensor sin, std::span<const double> inv_freq,
                         double attention_factor, int64_t first_position) {
  check_rope_table(cos, sin, inv_freq, attention_factor, first_position);
  do_rope_table(cos, sin, inv_freq, attention_factor, first_position);
}
void Backend::rope_forward(Tensor x, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                           int64_t first_row) {
  check_rope_forward(x, cos, sin, head_dim, first_row);
  do_rope_forward(x, cos, sin, head_dim, first_row);
}
void Backend::rope_backward(Tensor dx, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                            int64_t first_row) {
  check_rope_backward(dx, cos, sin, head_dim, first_row);
  do_rope_backward(dx, cos, sin, head_dim, first_row);
}
void Backend::swiglu_forward(Tensor a, ConstTensor g, ConstTensor u) {
  check_swiglu_forward(a, g, u);
  do_swiglu_forward(a, g, u);
}
void Backend::swiglu_backward(Tensor dg, Tensor du, ConstTensor da, ConstTensor g, ConstTensor u) {
  check_swiglu_backward(dg, du, da, g, u);
  do_swiglu_backward(dg, du, da, g, u);
}
void Backend::gelu_forward(Tensor y, ConstTensor x) {
  check_gelu_forward(y, x);
  do_gelu_forward(y, x);
}
void Backend::gelu_backward(Tensor dx, ConstTensor dy, ConstTensor x) {
  check_gelu_backward(dx, dy, x);
  do_gelu_backward(dx, dy, x);
}
void Backend::bias_add(Tensor y, ConstTensor b) {
  check_bias_add(y, b);
  do_bias_add(y, b);
}
void Backend::bias_backward(Tensor db, ConstTensor dy) {
  check_bias_backward(db, dy);
  do_bias_backward(db, dy);
}
void Backend::embedding_forward(Tensor x, View<const int32_t> tokens, ConstTensor wte) {
  check_embedding_forward(x, tokens, wte, host_reads_ids(tokens.data()));
  do_embedding_forward(x, tokens, wte);
}
void Backend::embedding_backward(Tensor dwte, ConstTensor dx, View<const int32_t> tokens) {
  check_embedding_backward(dwte, dx, tokens, host_reads_ids(tokens.data()));
  do_embedding_backward(dwte, dx, tokens);
}
void Backend::cross_entropy(Tensor losses, Tensor dlogits, ConstTensor logits,
                            View<const int32_t> targets, float grad_scale) {
  check_cross_entropy(losses, dlogits, logits, targets, grad_scale, host_reads_ids(targets.data()));
  do_cross_entropy(losses, dlogits, logits, targets, grad_scale);
}
void Backend::vocab_parallel_ce_stats(Tensor stats, Tensor target_logit, ConstTensor logits,
                                      View<const int32_t> targets) {
  check_vocab_parallel_ce_stats(stats, target_logit, logits, targets,
                                host_reads_ids(targets.data()));
  do_vocab_parallel_ce_stats(stats, target_logit, logits, targets);
}
void Backend::vocab_parallel_ce(Tensor losses, Tensor dlogits, ConstTensor logits,
                                View<const int32_t> targets, ConstTensor stats,
                                ConstTensor target_logit, float grad_scale) {
  check_vocab_parallel_ce(losses, dlogits, logits, targets, stats, target_logit,
                          host_reads_ids(targets.data()));
  do_vocab_parallel_ce(losses, dlogits, logits, targets, stats, target_logit, grad_scale);
}
void Backend::attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k, ConstTensor v,
                                int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                                AttnMask mask) {
  check_attention_mask("attention_forward", mask,
                       check_attention_forward(o, lse, q, k, v, batch, n_heads, n_kv_heads), true);
  do_attention_forward(o, lse, q, k, v, batch, n_heads, n_kv_heads, scratch, mask);
}
void Backend::attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout, ConstTensor q,
                                 ConstTensor k, ConstTensor v, ConstTensor o, ConstTensor lse,
                                 int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                                 AttnMask mask) {
  check_attention_mask(
      "attention_backward", mask,
      check_attention_backward(dq, dk, dv, dout, q, k, v, o, lse, batch, n_heads, n_kv_heads),
      true);
  do_attention_backward(dq, dk, dv, dout, q, k, v, o, lse, batch, n_heads, n_kv_heads, scratch,
                        mask);
}
void Backend::attention_merge(Tensor o, Tensor lse, ConstTensor o_part, ConstTensor lse_part) {
  check_attention_merge(o, lse, o_part, lse_part);
  do_attention_merge(o, lse, o_part, lse_part);
}
void Backend::attention_decode(Tensor o, ConstTensor q, ConstTensor k, ConstTensor v, int64_t first,
                               int64_t n_heads, int64_t n_kv_heads, Tensor scratch) {
  check_attention_decode(o, q, k, v, first, n_heads, n_kv_heads);
  do_attention_decode(o, q, k, v, first, n_heads, n_kv_heads, scratch);
}
void Backend::copy(Tensor dst, ConstTensor src) {
  check_copy(dst, src);
  do_copy(dst, src);
}
void Backend::convert(Tensor dst, ConstTensor src) {
  check_convert(dst, src);
  do_convert(dst, src);
}
void Backend::fill(Tensor dst, float value) {
  check_fill(dst, value);
  do_fill(dst, value);
}
void Backend::scale(Tensor x, float factor) {
  check_scale(x, factor);
  do_scale(x, factor);
}
void Backend::add_into(Tensor dst, ConstTensor src) {
  check_add_into(dst, src);
  do_add_into(dst, src);
}
double Backend::sum(ConstTensor x) {
  check_sum(x);
  return do_sum(x);
}
double Backend::sum_squares(ConstTensor x) {
  check_sum_squares(x);
  return do_sum_squares(x);
}
double Backend::noise_probe_pass(Tensor g, Tensor sum, NoiseProbePass pass, View<double> partial) {
  check_optimizer_update("noise_probe_pass", g, g, {sum});
  return do_noise_probe_pass(g, sum, pass, partial);
}

}  // namespace memo
