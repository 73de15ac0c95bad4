#include "memo/cpu/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "memo/backend/checks.h"
#include "memo/cpu/kernels.h"
#include "memo/cpu/matmul_peak.h"
#include "memo/cpu/optim_kernels.h"
#include "memo/cpu/tensor_ops.h"

namespace memo {

// A bad MEMO_CPU_ISA is refused here, before anything is printed or run.
CpuBackend::CpuBackend(CpuOptions options) : options_(options) { cpu::check_isa_cap(); }

CpuBackend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

std::string CpuBackend::warning() const { return cpu::blas_warning(); }

// The bf16 products and attention are named too: a bf16 run over this backend uses them (or says
// it cannot).
std::string CpuBackend::describe() const {
  const std::string amx_refusal = cpu::amx_refusal();
  return str("cpu, fp32, ", cpu::blas_name(), "; ",
             bf16_products()               ? cpu::bf16_products_name()
             : cpu::bf16_products_native() ? "bf16 products off (f32 by conversion)"
                                           : cpu::bf16_products_name(),
             bf16_attention() ? str("; ", cpu::bf16_attention_name()) : std::string(),
             amx_refusal.empty() ? std::string() : str("; ", amx_refusal));
}

bool CpuBackend::bf16_products() const {
  return options_.bf16_products && cpu::bf16_products_native();
}

bool CpuBackend::bf16_attention() const {
  return options_.bf16_attention && cpu::bf16_attention_native();
}

int64_t CpuBackend::reproducible_rows() const { return cpu::kTokenPanelRows; }

RawAllocator& CpuBackend::allocator(MemSpace space) {
  return pick_allocator(space, {&host_, &pinned_, &device_}, "cpu");
}

std::unique_ptr<Stream> CpuBackend::make_copy_stream(std::string name,
                                                     const StreamOptions& options) {
  return std::make_unique<CopyStream>(std::move(name), options);
}

// The device is host memory and kernels have finished when they return: plain copies.
void CpuBackend::copy_to_host(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, size_t(bytes));
}
void CpuBackend::copy_from_host(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, size_t(bytes));
}

// Measured once per process and kept (a second run in the same process, as the tests make, does
// not spend another half second on it), unless a longer measurement is asked for.
double CpuBackend::measure_matmul_peak_flops(double seconds) {
  const std::lock_guard<std::mutex> lock(peak_mutex_);
  if (peak_seconds_ < seconds) {
    peak_flops_ = cpu::measure_matmul_peak_flops(seconds);
    peak_seconds_ = seconds;
  }
  return peak_flops_;
}

double CpuBackend::measure_bf16_matmul_peak_flops(double seconds) {
  if (!bf16_products()) return measure_matmul_peak_flops(seconds);
  const std::lock_guard<std::mutex> lock(peak_mutex_);
  if (bf16_peak_seconds_ < seconds) {
    bf16_peak_flops_ = cpu::measure_bf16_matmul_peak_flops(seconds);
    bf16_peak_seconds_ = seconds;
  }
  return bf16_peak_flops_;
}

// bf16 operands go to oneDNN's bf16 products when they are on (Note [bf16 products on the CPU]);
// with them off they reach cpu::matmul's f32 views and are refused there by dtype.
namespace {
bool bf16_operands(const CpuBackend& be, ConstTensor a, ConstTensor b) {
  return be.bf16_products() && a.dtype() == DType::kBF16 && b.dtype() == DType::kBF16;
}
}  // namespace

void CpuBackend::do_matmul(Tensor c, ConstTensor a, ConstTensor b, bool trans_a, bool trans_b,
                           float alpha, float beta) {
  if (bf16_operands(*this, a, b)) return cpu::matmul_bf16(c, a, b, trans_a, trans_b, alpha, beta);
  cpu::matmul(c, a, b, trans_a, trans_b, alpha, beta);
}
void CpuBackend::do_matmul_token_panels(Tensor c, ConstTensor a, ConstTensor b, float beta) {
  if (bf16_operands(*this, a, b)) return cpu::matmul_bf16_token_panels(c, a, b, true, beta);
  cpu::matmul_token_panels(c, a, b, beta);
}
void CpuBackend::do_matmul_token_panels_kn(Tensor c, ConstTensor a, ConstTensor b, float beta) {
  if (bf16_operands(*this, a, b)) return cpu::matmul_bf16_token_panels(c, a, b, false, beta);
  cpu::matmul_token_panels_kn(c, a, b, beta);
}
// Note [bf16 elementwise on the CPU]: activations X and working weights W are each f32 or bf16
// (a bf16 run's layers: both bf16; a bf16 model decoding in f32: f32 activations, bf16 weights);
// every other argument is f32 (the checked views say so if not).
namespace {
bool is_bf16(ConstTensor t) { return t.dtype() == DType::kBF16; }
// f(x_tag, w_tag) with the element types of x and w: float or bf16 each.
template <class F>
void by_dtypes(ConstTensor x, ConstTensor w, F&& f) {
  if (is_bf16(x)) {
    if (is_bf16(w)) return f(bf16{}, bf16{});
    return f(bf16{}, float{});
  }
  if (is_bf16(w)) return f(float{}, bf16{});
  f(float{}, float{});
}
}  // namespace

void CpuBackend::do_rmsnorm_forward(Tensor y, Tensor inv_rms, ConstTensor x, ConstTensor w,
                                    float eps) {
  by_dtypes(x, w, [&]<class X, class W>(X, W) {
    cpu::rmsnorm_forward<X, W>(y.as<X>(), inv_rms, x.as<const X>(), w.as<const W>(), eps);
  });
}
void CpuBackend::do_rmsnorm_backward(Tensor dx, Tensor dw, ConstTensor dy, ConstTensor x,
                                     ConstTensor w, ConstTensor inv_rms) {
  by_dtypes(x, w, [&]<class X, class W>(X, W) {
    cpu::rmsnorm_backward<X, W>(dx.as<X>(), dw, dy.as<const X>(), x.as<const X>(), w.as<const W>(),
                                inv_rms);
  });
}
void CpuBackend::do_layernorm_forward(Tensor y, Tensor mean, Tensor rstd, ConstTensor x,
                                      ConstTensor w, ConstTensor b, float eps) {
  by_dtypes(x, w, [&]<class X, class W>(X, W) {
    cpu::layernorm_forward<X, W>(y.as<X>(), mean, rstd, x.as<const X>(), w.as<const W>(),
                                 b.as<const W>(), eps);
  });
}
void CpuBackend::do_layernorm_backward(Tensor dx, Tensor dw, Tensor db, ConstTensor dy,
                                       ConstTensor x, ConstTensor w, ConstTensor mean,
                                       ConstTensor rstd) {
  by_dtypes(x, w, [&]<class X, class W>(X, W) {
    cpu::layernorm_backward<X, W>(dx.as<X>(), dw, db, dy.as<const X>(), x.as<const X>(),
                                  w.as<const W>(), mean, rstd);
  });
}
void CpuBackend::do_rope_table(Tensor cos, Tensor sin, std::span<const double> inv_freq,
                               double attention_factor, int64_t first_position) {
  cpu::rope_table(cos, sin, inv_freq, attention_factor, first_position);
}
void CpuBackend::do_rope_forward(Tensor x, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                                 int64_t first_row) {
  if (is_bf16(x)) return cpu::rope_forward(x.as<bf16>(), cos, sin, head_dim, first_row);
  cpu::rope_forward(x, cos, sin, head_dim, first_row);
}
void CpuBackend::do_rope_backward(Tensor dx, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                                  int64_t first_row) {
  if (is_bf16(dx)) return cpu::rope_backward(dx.as<bf16>(), cos, sin, head_dim, first_row);
  cpu::rope_backward(dx, cos, sin, head_dim, first_row);
}
void CpuBackend::do_swiglu_forward(Tensor a, ConstTensor g, ConstTensor u) {
  if (is_bf16(g))
    return cpu::swiglu_forward<bf16>(a.as<bf16>(), g.as<const bf16>(), u.as<const bf16>());
  cpu::swiglu_forward(a, g, u);
}
void CpuBackend::do_swiglu_backward(Tensor dg, Tensor du, ConstTensor da, ConstTensor g,
                                    ConstTensor u) {
  if (is_bf16(g))
    return cpu::swiglu_backward<bf16>(dg.as<bf16>(), du.as<bf16>(), da.as<const bf16>(),
                                      g.as<const bf16>(), u.as<const bf16>());
  cpu::swiglu_backward(dg, du, da, g, u);
}
void CpuBackend::do_gelu_forward(Tensor y, ConstTensor x) {
  if (is_bf16(x)) return cpu::gelu_forward<bf16>(y.as<bf16>(), x.as<const bf16>());
  cpu::gelu_forward(y, x);
}
void CpuBackend::do_gelu_backward(Tensor dx, ConstTensor dy, ConstTensor x) {
  if (is_bf16(x))
    return cpu::gelu_backward<bf16>(dx.as<bf16>(), dy.as<const bf16>(), x.as<const bf16>());
  cpu::gelu_backward(dx, dy, x);
}
void CpuBackend::do_bias_add(Tensor y, ConstTensor b) {
  by_dtypes(y, b, [&]<class A, class W>(A, W) { cpu::bias_add<A, W>(y.as<A>(), b.as<const W>()); });
}
void CpuBackend::do_bias_backward(Tensor db, ConstTensor dy) {
  if (is_bf16(dy)) return cpu::bias_backward<bf16>(db, dy.as<const bf16>());
  cpu::bias_backward(db, dy);
}
void CpuBackend::do_embedding_forward(Tensor x, View<const int32_t> tokens, ConstTensor wte) {
  by_dtypes(x, wte, [&]<class A, class W>(A, W) {
    cpu::embedding_forward<A, W>(x.as<A>(), tokens, wte.as<const W>());
  });
}
void CpuBackend::do_embedding_backward(Tensor dwte, ConstTensor dx, View<const int32_t> tokens) {
  if (is_bf16(dx)) return cpu::embedding_backward<bf16>(dwte, dx.as<const bf16>(), tokens);
  cpu::embedding_backward(dwte, dx, tokens);
}
void CpuBackend::do_cross_entropy(Tensor losses, Tensor dlogits, ConstTensor logits,
                                  View<const int32_t> targets, float grad_scale) {
  cpu::cross_entropy(losses, dlogits, logits, targets, grad_scale);
}
void CpuBackend::do_vocab_parallel_ce_stats(Tensor stats, Tensor target_logit, ConstTensor logits,
                                            View<const int32_t> targets) {
  cpu::vocab_parallel_ce_stats(stats, target_logit, logits, targets);
}
void CpuBackend::do_vocab_parallel_ce(Tensor losses, Tensor dlogits, ConstTensor logits,
                                      View<const int32_t> targets, ConstTensor stats,
                                      ConstTensor target_logit, float grad_scale) {
  cpu::vocab_parallel_ce(losses, dlogits, logits, targets, stats, target_logit, grad_scale);
}
int64_t CpuBackend::attention_forward_scratch_numel(int64_t, int64_t head_dim, int64_t n_heads,
                                                    int64_t n_kv_heads) {
  return cpu::attention_forward_scratch_numel(head_dim, n_heads, n_kv_heads);
}
// bf16 attention's scratch, at least the f32 kernel's: a call with an f32 tensor among its bf16
// ones is widened by Bf16StorageBackend and runs the f32 kernel in the same scratch.
int64_t CpuBackend::bf16_attention_forward_scratch_numel(int64_t, int64_t head_dim, int64_t n_heads,
                                                         int64_t n_kv_heads) {
  return std::max(cpu::attention_forward_scratch_numel(head_dim, n_heads, n_kv_heads),
                  cpu::attention_bf16_forward_scratch_numel(head_dim, n_heads, n_kv_heads));
}
// bf16 q (bf16_attention(): Bf16StorageBackend hands bf16 calls over as they are) runs on the
// bf16 kernels, which refuse other dtypes by name.
void CpuBackend::do_attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k,
                                      ConstTensor v, int64_t batch, int64_t n_heads,
                                      int64_t n_kv_heads, Tensor scratch, AttnMask mask) {
  if (q.dtype() == DType::kBF16)
    return cpu::attention_bf16_forward(o, lse, q, k, v, batch, n_heads, n_kv_heads, scratch, mask);
  cpu::attention_forward(o, lse, q, k, v, batch, n_heads, n_kv_heads, scratch, mask);
}
int64_t CpuBackend::attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                                     int64_t n_kv_heads) {
  return cpu::attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
}
int64_t CpuBackend::bf16_attention_backward_scratch_numel(int64_t seq, int64_t head_dim,
                                                          int64_t n_heads, int64_t n_kv_heads) {
  return std::max(cpu::attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads),
                  cpu::attention_bf16_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads));
}
void CpuBackend::do_attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout,
                                       ConstTensor q, ConstTensor k, ConstTensor v, ConstTensor o,
                                       ConstTensor lse, int64_t batch, int64_t n_heads,
                                       int64_t n_kv_heads, Tensor scratch, AttnMask mask) {
  if (q.dtype() == DType::kBF16)
    return cpu::attention_bf16_backward(dq, dk, dv, dout, q, k, v, o, lse, batch, n_heads,
                                        n_kv_heads, scratch, mask);
  cpu::attention_backward(dq, dk, dv, dout, q, k, v, o, lse, batch, n_heads, n_kv_heads, scratch,
                          mask);
}
void CpuBackend::do_attention_merge(Tensor o, Tensor lse, ConstTensor o_part,
                                    ConstTensor lse_part) {
  cpu::attention_merge(o, lse, o_part, lse_part);
}
int64_t CpuBackend::attention_decode_scratch_numel(int64_t keys) {
  return cpu::attention_decode_scratch_numel(keys);
}
void CpuBackend::do_attention_decode(Tensor o, ConstTensor q, ConstTensor k, ConstTensor v,
                                     int64_t first, int64_t n_heads, int64_t n_kv_heads,
                                     Tensor scratch) {
  cpu::attention_decode(o, q, k, v, first, n_heads, n_kv_heads, scratch);
}
void CpuBackend::do_copy(Tensor dst, ConstTensor src) {
  if (is_bf16(dst)) return cpu::copy(dst.as<bf16>(), src.as<const bf16>());
  cpu::copy(dst, src);
}
void CpuBackend::do_convert(Tensor dst, ConstTensor src) {
  const bool to_bf16 = dst.dtype() == DType::kBF16, from_bf16 = src.dtype() == DType::kBF16;
  if (to_bf16 && from_bf16) {
    std::memcpy(dst.as<bf16>().data(), src.as<const bf16>().data(), size_t(dst.bytes()));
  } else if (to_bf16) {
    cpu::convert(dst.as<bf16>(), src.as<const float>());
  } else if (from_bf16) {
    cpu::convert(dst.as<float>(), src.as<const bf16>());
  } else {
    cpu::copy(dst, src);
  }
}
void CpuBackend::do_fill(Tensor dst, float value) {
  if (is_bf16(dst)) return cpu::fill(dst.as<bf16>(), value);
  cpu::fill(dst, value);
}
void CpuBackend::do_scale(Tensor x, float factor) {
  if (is_bf16(x)) return cpu::scale(x.as<bf16>(), factor);
  cpu::scale(x, factor);
}
void CpuBackend::do_add_into(Tensor dst, ConstTensor src) {
  if (is_bf16(dst) && is_bf16(src))
    return cpu::add_into<bf16, bf16>(dst.as<bf16>(), src.as<const bf16>());
  if (is_bf16(dst)) return cpu::add_into<bf16, float>(dst.as<bf16>(), src);
  if (is_bf16(src)) return cpu::add_into<float, bf16>(dst, src.as<const bf16>());
  cpu::add_into(dst, src);
}
double CpuBackend::do_sum(ConstTensor x) { return cpu::sum(x); }
double CpuBackend::do_sum_squares(ConstTensor x) { return cpu::sum_squares(x); }

int64_t CpuBackend::noise_probe_partial_numel(int64_t n) { return cpu::noise_probe_chunks(n); }
double CpuBackend::do_noise_probe_pass(Tensor g, Tensor sum, NoiseProbePass pass,
                                       View<double> partial) {
  return cpu::noise_probe_pass(g, sum, pass, partial);
}

void CpuBackend::do_sgd_update(Tensor p, Tensor buf, ConstTensor g, const SgdStep& s) {
  cpu::sgd_update(p, buf, g, s);
}
void CpuBackend::do_signsgd_update(Tensor p, Tensor m, ConstTensor g, const SignSgdStep& s) {
  cpu::signsgd_update(p, m, g, s);
}
void CpuBackend::do_adam_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& s) {
  cpu::adam_update(p, m, v, g, s);
}
void CpuBackend::do_adamw_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& s) {
  cpu::adamw_update(p, m, v, g, s);
}
void CpuBackend::do_adagrad_update(Tensor p, Tensor sum, ConstTensor g, const AdagradStep& s) {
  cpu::adagrad_update(p, sum, g, s);
}
void CpuBackend::do_rmsprop_update(Tensor p, Tensor square_avg, Tensor grad_avg, Tensor buf,
                                   ConstTensor g, const RmspropStep& s) {
  cpu::rmsprop_update(p, square_avg, grad_avg, buf, g, s);
}
void CpuBackend::do_lion_update(Tensor p, Tensor m, ConstTensor g, const LionStep& s) {
  cpu::lion_update(p, m, g, s);
}
int64_t CpuBackend::adafactor_partial_numel(int64_t rows, int64_t numel) {
  return std::max(rows, cpu::adafactor_chunks(numel));
}
double CpuBackend::do_adafactor_rms(ConstTensor x, View<double> partial) {
  return cpu::adafactor_rms(x, partial);
}
void CpuBackend::do_adafactor_update_matrix(Tensor p, Tensor m, Tensor row, Tensor col,
                                            ConstTensor g, Tensor row_inv, Tensor col_inv,
                                            View<double> partial, const AdafactorStep& s) {
  cpu::adafactor_update_matrix(p, m, row, col, g, row_inv, col_inv, partial, s);
}
void CpuBackend::do_adafactor_update_vector(Tensor p, Tensor m, Tensor v, ConstTensor g,
                                            View<double> partial, const AdafactorStep& s) {
  cpu::adafactor_update_vector(p, m, v, g, partial, s);
}

}  // namespace memo
