#include "memo/meta/meta_backend.h"

#include <cstring>

#include "memo/backend/checks.h"

namespace memo {

MetaBackend::MetaBackend(Backend& target) : MetaBackend(target, target.activation_dtype()) {}

MetaBackend::MetaBackend(Backend& target, DType activations)
    : target_(target), activations_(activations) {}

std::string MetaBackend::describe() const {
  return str("meta (shapes only), sized for ", target_.name());
}

std::unique_ptr<Stream> MetaBackend::make_copy_stream(std::string name, const StreamOptions&) {
  return std::make_unique<NullStream>(std::move(name));
}

// There are no values to read: the host gets zeros, never whatever an address range holds.
void MetaBackend::copy_to_host(void* dst, const void*, int64_t bytes) {
  if (bytes > 0) std::memset(dst, 0, size_t(bytes));
}

void MetaBackend::matmul(Tensor c, ConstTensor a, ConstTensor b, bool trans_a, bool trans_b,
                         float alpha, float beta) {
  check_matmul(c, a, b, trans_a, trans_b, alpha, beta);
}
// The panels are row slices of one product: checking the whole product checks every panel.
void MetaBackend::matmul_token_panels(Tensor c, ConstTensor a, ConstTensor b, float beta) {
  check_matmul(c, a, b, false, true, 1.0f, beta);
}
void MetaBackend::matmul_token_panels_kn(Tensor c, ConstTensor a, ConstTensor b, float beta) {
  check_matmul(c, a, b, false, false, 1.0f, beta);
}
void MetaBackend::rmsnorm_forward(Tensor y, Tensor inv_rms, ConstTensor x, ConstTensor w,
                                  float eps) {
  check_rmsnorm_forward(y, inv_rms, x, w, eps);
}
void MetaBackend::rmsnorm_backward(Tensor dx, Tensor dw, ConstTensor dy, ConstTensor x,
                                   ConstTensor w, ConstTensor inv_rms) {
  check_rmsnorm_backward(dx, dw, dy, x, w, inv_rms);
}
void MetaBackend::layernorm_forward(Tensor y, Tensor mean, Tensor rstd, ConstTensor x,
                                    ConstTensor w, ConstTensor b, float eps) {
  check_layernorm_forward(y, mean, rstd, x, w, b, eps);
}
void MetaBackend::layernorm_backward(Tensor dx, Tensor dw, Tensor db, ConstTensor dy, ConstTensor x,
                                     ConstTensor w, ConstTensor mean, ConstTensor rstd) {
  check_layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
}
void MetaBackend::rope_table(Tensor cos, Tensor sin, int64_t head_dim, float theta) {
  check_rope_table(cos, sin, head_dim, theta);
}
void MetaBackend::rope_forward(Tensor x, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                               int64_t first_row) {
  check_rope_forward(x, cos, sin, head_dim, first_row);
}
void MetaBackend::rope_backward(Tensor dx, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                                int64_t first_row) {
  check_rope_backward(dx, cos, sin, head_dim, first_row);
}
void MetaBackend::swiglu_forward(Tensor a, ConstTensor g, ConstTensor u) {
  check_swiglu_forward(a, g, u);
}
void MetaBackend::swiglu_backward(Tensor dg, Tensor du, ConstTensor da, ConstTensor g,
                                  ConstTensor u) {
  check_swiglu_backward(dg, du, da, g, u);
}
void MetaBackend::gelu_forward(Tensor y, ConstTensor x) { check_gelu_forward(y, x); }
void MetaBackend::gelu_backward(Tensor dx, ConstTensor dy, ConstTensor x) {
  check_gelu_backward(dx, dy, x);
}
void MetaBackend::bias_add(Tensor y, ConstTensor b) { check_bias_add(y, b); }
void MetaBackend::bias_backward(Tensor db, ConstTensor dy) { check_bias_backward(db, dy); }
void MetaBackend::embedding_forward(Tensor x, View<const int32_t> tokens, ConstTensor wte) {
  check_embedding_forward(x, tokens, wte);
}
void MetaBackend::embedding_backward(Tensor dwte, ConstTensor dx, View<const int32_t> tokens) {
  check_embedding_backward(dwte, dx, tokens);
}
void MetaBackend::cross_entropy(Tensor losses, Tensor dlogits, ConstTensor logits,
                                View<const int32_t> targets, float grad_scale) {
  check_cross_entropy(losses, dlogits, logits, targets, grad_scale);
}
void MetaBackend::vocab_parallel_ce_stats(Tensor stats, Tensor target_logit, ConstTensor logits,
                                          View<const int32_t> targets) {
  check_vocab_parallel_ce_stats(stats, target_logit, logits, targets);
}
void MetaBackend::vocab_parallel_ce(Tensor losses, Tensor dlogits, ConstTensor logits,
                                    View<const int32_t> targets, ConstTensor stats,
                                    ConstTensor target_logit, float) {
  check_vocab_parallel_ce(losses, dlogits, logits, targets, stats, target_logit);
}
int64_t MetaBackend::attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                                     int64_t n_kv_heads) {
  return activations_ == DType::kBF16 && target_.bf16_attention()
             ? target_.bf16_attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads)
             : target_.attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
}
void MetaBackend::attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k,
                                    ConstTensor v, int64_t batch, int64_t n_heads,
                                    int64_t n_kv_heads, Tensor scratch, AttnMask) {
  const AttnDims d = check_attention_forward(o, lse, q, k, v, batch, n_heads, n_kv_heads);
  check_scratch("attention_forward", scratch,
                q.dtype() == DType::kBF16
                    ? target_.bf16_attention_forward_scratch_numel(d.S, d.D, d.H, d.Hkv)
                    : target_.attention_forward_scratch_numel(d.S, d.D, d.H, d.Hkv));
}
int64_t MetaBackend::attention_backward_scratch_numel(int64_t seq, int64_t head_dim,
                                                      int64_t n_heads, int64_t n_kv_heads) {
  return activations_ == DType::kBF16 && target_.bf16_attention()
             ? target_.bf16_attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads)
             : target_.attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
}
void MetaBackend::attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout,
                                     ConstTensor q, ConstTensor k, ConstTensor v, ConstTensor o,
                                     ConstTensor lse, int64_t batch, int64_t n_heads,
                                     int64_t n_kv_heads, Tensor scratch, AttnMask) {
  const AttnDims d =
      check_attention_backward(dq, dk, dv, dout, q, k, v, o, lse, batch, n_heads, n_kv_heads);
  check_scratch("attention_backward", scratch,
                q.dtype() == DType::kBF16
                    ? target_.bf16_attention_backward_scratch_numel(d.S, d.D, d.H, d.Hkv)
                    : target_.attention_backward_scratch_numel(d.S, d.D, d.H, d.Hkv));
}
void MetaBackend::attention_merge(Tensor o, Tensor lse, ConstTensor o_part, ConstTensor lse_part) {
  check_attention_merge(o, lse, o_part, lse_part);
}
int64_t MetaBackend::attention_decode_scratch_numel(int64_t keys) {
  return target_.attention_decode_scratch_numel(keys);
}
void MetaBackend::attention_decode(Tensor o, ConstTensor q, ConstTensor k, ConstTensor v,
                                   int64_t first, int64_t n_heads, int64_t n_kv_heads,
                                   Tensor scratch) {
  check_attention_decode(o, q, k, v, first, n_heads, n_kv_heads);
  check_scratch("attention_decode", scratch,
                target_.attention_decode_scratch_numel(first + q.rows()));
}
void MetaBackend::copy(Tensor dst, ConstTensor src) { check_copy(dst, src); }
void MetaBackend::convert(Tensor dst, ConstTensor src) { check_convert(dst, src); }
void MetaBackend::fill(Tensor dst, float value) { check_fill(dst, value); }
void MetaBackend::scale(Tensor x, float factor) { check_scale(x, factor); }
void MetaBackend::add_into(Tensor dst, ConstTensor src) { check_add_into(dst, src); }
double MetaBackend::sum(ConstTensor x) {
  check_sum(x);
  return 0.0;
}
double MetaBackend::sum_squares(ConstTensor x) {
  check_sum_squares(x);
  return 0.0;
}

int64_t MetaBackend::noise_probe_partial_numel(int64_t n) {
  return target_.noise_probe_partial_numel(n);
}
double MetaBackend::noise_probe_pass(Tensor g, Tensor sum, NoiseProbePass, View<double>) {
  check_optimizer_update("noise_probe_pass", g, g, {sum});
  return 0.0;
}

void MetaBackend::sgd_update(Tensor p, Tensor buf, ConstTensor g, const SgdStep&) {
  check_optimizer_update("sgd_update", p, g, {buf});
}
void MetaBackend::signsgd_update(Tensor p, Tensor m, ConstTensor g, const SignSgdStep&) {
  check_optimizer_update("signsgd_update", p, g, {m});
}
void MetaBackend::adam_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep&) {
  check_optimizer_update("adam_update", p, g, {m, v});
}
void MetaBackend::adamw_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep&) {
  check_optimizer_update("adamw_update", p, g, {m, v});
}
void MetaBackend::adagrad_update(Tensor p, Tensor sum, ConstTensor g, const AdagradStep&) {
  check_optimizer_update("adagrad_update", p, g, {sum});
}
void MetaBackend::rmsprop_update(Tensor p, Tensor square_avg, Tensor grad_avg, Tensor buf,
                                 ConstTensor g, const RmspropStep&) {
  check_optimizer_update("rmsprop_update", p, g, {square_avg, grad_avg, buf});
}
void MetaBackend::lion_update(Tensor p, Tensor m, ConstTensor g, const LionStep&) {
  check_optimizer_update("lion_update", p, g, {m});
}
int64_t MetaBackend::adafactor_partial_numel(int64_t rows, int64_t numel) {
  return target_.adafactor_partial_numel(rows, numel);
}
double MetaBackend::adafactor_rms(ConstTensor x, View<double>) {
  check_sum_squares(x);
  return 0.0;
}
void MetaBackend::adafactor_update_matrix(Tensor p, Tensor m, Tensor, Tensor, ConstTensor g, Tensor,
                                          Tensor, View<double>, const AdafactorStep&) {
  check_optimizer_update("adafactor_update_matrix", p, g, {m});
}
void MetaBackend::adafactor_update_vector(Tensor p, Tensor m, Tensor v, ConstTensor g, View<double>,
                                          const AdafactorStep&) {
  check_optimizer_update("adafactor_update_vector", p, g, {m, v});
}

}  // namespace memo
