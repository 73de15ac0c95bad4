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

void MetaBackend::do_matmul(Tensor c, ConstTensor a, ConstTensor b, bool trans_a, bool trans_b,
                            float alpha, float beta) {}
void MetaBackend::do_matmul_token_panels(Tensor c, ConstTensor a, ConstTensor b, float beta) {}
void MetaBackend::do_matmul_token_panels_kn(Tensor c, ConstTensor a, ConstTensor b, float beta) {}
void MetaBackend::do_rmsnorm_forward(Tensor y, Tensor inv_rms, ConstTensor x, ConstTensor w,
                                     float eps) {}
void MetaBackend::do_rmsnorm_backward(Tensor dx, Tensor dw, ConstTensor dy, ConstTensor x,
                                      ConstTensor w, ConstTensor inv_rms) {}
void MetaBackend::do_layernorm_forward(Tensor y, Tensor mean, Tensor rstd, ConstTensor x,
                                       ConstTensor w, ConstTensor b, float eps) {}
void MetaBackend::do_layernorm_backward(Tensor dx, Tensor dw, Tensor db, ConstTensor dy,
                                        ConstTensor x, ConstTensor w, ConstTensor mean,
                                        ConstTensor rstd) {}
void MetaBackend::do_rope_table(Tensor cos, Tensor sin, std::span<const double> inv_freq,
                                double attention_factor, int64_t first_position) {}
void MetaBackend::do_rope_forward(Tensor x, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                                  int64_t first_row) {}
void MetaBackend::do_rope_backward(Tensor dx, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                                   int64_t first_row) {}
void MetaBackend::do_swiglu_forward(Tensor a, ConstTensor g, ConstTensor u) {}
void MetaBackend::do_swiglu_backward(Tensor dg, Tensor du, ConstTensor da, ConstTensor g,
                                     ConstTensor u) {}
void MetaBackend::do_gelu_forward(Tensor y, ConstTensor x) {}
void MetaBackend::do_gelu_backward(Tensor dx, ConstTensor dy, ConstTensor x) {}
void MetaBackend::do_bias_add(Tensor y, ConstTensor b) {}
void MetaBackend::do_bias_backward(Tensor db, ConstTensor dy) {}
void MetaBackend::do_embedding_forward(Tensor x, View<const int32_t> tokens, ConstTensor wte) {}
void MetaBackend::do_embedding_backward(Tensor dwte, ConstTensor dx, View<const int32_t> tokens) {}
void MetaBackend::do_cross_entropy(Tensor losses, Tensor dlogits, ConstTensor logits,
                                   View<const int32_t> targets, float grad_scale) {}
void MetaBackend::do_vocab_parallel_ce_stats(Tensor stats, Tensor target_logit, ConstTensor logits,
                                             View<const int32_t> targets) {}
void MetaBackend::do_vocab_parallel_ce(Tensor losses, Tensor dlogits, ConstTensor logits,
                                       View<const int32_t> targets, ConstTensor stats,
                                       ConstTensor target_logit, float) {}
int64_t MetaBackend::attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                                     int64_t n_kv_heads) {
  return activations_ == DType::kBF16 && target_.bf16_attention()
             ? target_.bf16_attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads)
             : target_.attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
}
void MetaBackend::do_attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k,
                                       ConstTensor v, int64_t batch, int64_t n_heads,
                                       int64_t n_kv_heads, Tensor scratch, AttnMask) {
  const AttnDims d = attention_dims(q, batch, n_heads, n_kv_heads);
  // bf16 activations reach target's bf16 kernels where it has them, else widened to its f32 ones
  check_scratch("attention_forward", scratch,
                q.dtype() == DType::kBF16 && target_.bf16_attention()
                    ? target_.bf16_attention_forward_scratch_numel(d.S, d.D, d.H, d.Hkv)
                    : target_.attention_forward_scratch_numel(d.S, d.D, d.H, d.Hkv));
}
int64_t MetaBackend::attention_backward_scratch_numel(int64_t seq, int64_t head_dim,
                                                      int64_t n_heads, int64_t n_kv_heads) {
  return activations_ == DType::kBF16 && target_.bf16_attention()
             ? target_.bf16_attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads)
             : target_.attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
}
void MetaBackend::do_attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout,
                                        ConstTensor q, ConstTensor k, ConstTensor v, ConstTensor o,
                                        ConstTensor lse, int64_t batch, int64_t n_heads,
                                        int64_t n_kv_heads, Tensor scratch, AttnMask) {
  const AttnDims d = attention_dims(q, batch, n_heads, n_kv_heads);
  check_scratch("attention_backward", scratch,
                q.dtype() == DType::kBF16 && target_.bf16_attention()
                    ? target_.bf16_attention_backward_scratch_numel(d.S, d.D, d.H, d.Hkv)
                    : target_.attention_backward_scratch_numel(d.S, d.D, d.H, d.Hkv));
}
void MetaBackend::do_attention_merge(Tensor o, Tensor lse, ConstTensor o_part,
                                     ConstTensor lse_part) {}
int64_t MetaBackend::attention_decode_scratch_numel(int64_t keys) {
  return target_.attention_decode_scratch_numel(keys);
}
void MetaBackend::do_attention_decode(Tensor o, ConstTensor q, ConstTensor k, ConstTensor v,
                                      int64_t first, int64_t n_heads, int64_t n_kv_heads,
                                      Tensor scratch) {
  check_scratch("attention_decode", scratch,
                target_.attention_decode_scratch_numel(first + q.rows()));
}
void MetaBackend::do_copy(Tensor dst, ConstTensor src) {}
void MetaBackend::do_convert(Tensor dst, ConstTensor src) {}
void MetaBackend::do_fill(Tensor dst, float value) {}
void MetaBackend::do_scale(Tensor x, float factor) {}
void MetaBackend::do_add_into(Tensor dst, ConstTensor src) {}
double MetaBackend::do_sum(ConstTensor x) { return 0.0; }
double MetaBackend::do_sum_squares(ConstTensor x) { return 0.0; }

int64_t MetaBackend::noise_probe_partial_numel(int64_t n) {
  return target_.noise_probe_partial_numel(n);
}
double MetaBackend::do_noise_probe_pass(Tensor g, Tensor sum, NoiseProbePass, View<double>) {
  return 0.0;
}

void MetaBackend::do_sgd_update(Tensor p, Tensor buf, ConstTensor g, const SgdStep&) {}
void MetaBackend::do_signsgd_update(Tensor p, Tensor m, ConstTensor g, const SignSgdStep&) {}
void MetaBackend::do_adam_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep&) {}
void MetaBackend::do_adamw_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep&) {}
void MetaBackend::do_adagrad_update(Tensor p, Tensor sum, ConstTensor g, const AdagradStep&) {}
void MetaBackend::do_rmsprop_update(Tensor p, Tensor square_avg, Tensor grad_avg, Tensor buf,
                                    ConstTensor g, const RmspropStep&) {}
void MetaBackend::do_lion_update(Tensor p, Tensor m, ConstTensor g, const LionStep&) {}
int64_t MetaBackend::adafactor_partial_numel(int64_t rows, int64_t numel) {
  return target_.adafactor_partial_numel(rows, numel);
}
// adafactor_rms has no shared entry check (Note [Checked entry points]): the meta backend's own.
double MetaBackend::do_adafactor_rms(ConstTensor x, View<double>) {
  check_sum_squares(x);
  return 0.0;
}
void MetaBackend::do_adafactor_update_matrix(Tensor p, Tensor m, Tensor, Tensor, ConstTensor g,
                                             Tensor, Tensor, View<double>, const AdafactorStep&) {}
void MetaBackend::do_adafactor_update_vector(Tensor p, Tensor m, Tensor v, ConstTensor g,
                                             View<double>, const AdafactorStep&) {}

}  // namespace memo
