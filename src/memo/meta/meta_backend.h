// The meta backend: shapes and address ranges only. See Note [Meta backend].
#pragma once

#include <memory>

#include "memo/backend/backend.h"
#include "memo/backend/copy_stream.h"

namespace memo {

// Note [Meta backend]
// Planning a 7B layer at a million tokens means tracing requests of tens of GiB each, on a laptop.
// The meta backend runs the real model, strategy and trainer code with shapes and sizes but no
// data and no arithmetic: every kernel runs the same entry checks as the CPU kernel
// (backend/checks.h) and returns; reductions return 0; copy streams move nothing and their events
// are complete; every memory space hands out address ranges reserved with no access rights and
// no memory behind them (backend/address_space.h). So the trace recorder sees the same requests,
// sizes, order and lifetimes as in a real step, and code that touched data it should not (a
// kernel outside the backend, an operator[] on a device view) faults at its first load instead of
// silently reading garbage. Sizes that depend on an implementation (attention scratch, the
// reproducible row granularity) are those of `target`, the backend the plan is for.
class MetaBackend final : public Backend {
 public:
  // target: whose scratch sizes and row granularity the trace takes (the CPU's by default).
  // activations: the dtype of the run being planned (a bf16 GPU run: kBF16; default: target's).
  explicit MetaBackend(Backend& target);
  MetaBackend(Backend& target, DType activations);
  const char* name() const override { return "meta"; }
  std::string describe() const override;
  bool has_values() const override { return false; }
  int64_t reproducible_rows() const override { return target_.reproducible_rows(); }
  // target's native bf16 kernels, so a bf16 trace widens (and counts) what the run widens
  bool bf16_products() const override { return target_.bf16_products(); }
  bool bf16_attention() const override { return target_.bf16_attention(); }
  bool masked_attention() const override { return target_.masked_attention(); }
  bool bf16_elementwise() const override { return target_.bf16_elementwise(); }
  DType activation_dtype() const override { return activations_; }
  MemSpace device_space() const override { return MemSpace::kMeta; }
  RawAllocator& allocator(MemSpace) override { return addresses_; }
  bool host_can_access(MemSpace) const override { return false; }
  std::string device_name() const override { return ""; }
  // target's workspace (the CPU: none; CUDA: cuBLASLt's), so a trace holds its request.
  int64_t matmul_workspace_bytes() const override { return target_.matmul_workspace_bytes(); }
  void set_matmul_workspace(Tensor) override {}
  int64_t device_free_bytes() override { return 0; }
  Stream& compute_stream() override { return compute_; }
  std::unique_ptr<Stream> make_copy_stream(std::string name, const StreamOptions& options) override;
  void copy_to_host(void* dst, const void* src, int64_t bytes) override;
  void copy_from_host(void*, const void*, int64_t) override {}
  double measure_matmul_peak_flops(double) override { return 0.0; }

  int64_t attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                          int64_t n_kv_heads) override;
  int64_t attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                           int64_t n_kv_heads) override;
  int64_t f32_attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                              int64_t n_kv_heads) override {
    return target_.f32_attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
  }
  int64_t bf16_attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                               int64_t n_kv_heads) override {
    return target_.bf16_attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
  }
  int64_t bf16_attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                                int64_t n_kv_heads) override {
    return target_.bf16_attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
  }
  int64_t attention_decode_scratch_numel(int64_t keys) override;
  int64_t noise_probe_partial_numel(int64_t n) override;
  int64_t adafactor_partial_numel(int64_t rows, int64_t numel) override;

  int64_t reserved_bytes() const { return addresses_.reserved_bytes(); }

 protected:
  void do_matmul(Tensor c, ConstTensor a, ConstTensor b, bool trans_a, bool trans_b, float alpha,
                 float beta) override;
  void do_matmul_token_panels(Tensor c, ConstTensor a, ConstTensor b, float beta) override;
  void do_matmul_token_panels_kn(Tensor c, ConstTensor a, ConstTensor b, float beta) override;
  void do_rmsnorm_forward(Tensor y, Tensor inv_rms, ConstTensor x, ConstTensor w,
                          float eps) override;
  void do_rmsnorm_backward(Tensor dx, Tensor dw, ConstTensor dy, ConstTensor x, ConstTensor w,
                           ConstTensor inv_rms) override;
  void do_layernorm_forward(Tensor y, Tensor mean, Tensor rstd, ConstTensor x, ConstTensor w,
                            ConstTensor b, float eps) override;
  void do_layernorm_backward(Tensor dx, Tensor dw, Tensor db, ConstTensor dy, ConstTensor x,
                             ConstTensor w, ConstTensor mean, ConstTensor rstd) override;
  void do_rope_table(Tensor cos, Tensor sin, std::span<const double> inv_freq,
                     double attention_factor, int64_t first_position) override;
  void do_rope_forward(Tensor x, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                       int64_t first_row) override;
  void do_rope_backward(Tensor dx, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                        int64_t first_row) override;
  void do_swiglu_forward(Tensor a, ConstTensor g, ConstTensor u) override;
  void do_swiglu_backward(Tensor dg, Tensor du, ConstTensor da, ConstTensor g,
                          ConstTensor u) override;
  void do_gelu_forward(Tensor y, ConstTensor x) override;
  void do_gelu_backward(Tensor dx, ConstTensor dy, ConstTensor x) override;
  void do_bias_add(Tensor y, ConstTensor b) override;
  void do_bias_backward(Tensor db, ConstTensor dy) override;
  void do_embedding_forward(Tensor x, View<const int32_t> tokens, ConstTensor wte) override;
  void do_embedding_backward(Tensor dwte, ConstTensor dx, View<const int32_t> tokens) override;
  void do_cross_entropy(Tensor losses, Tensor dlogits, ConstTensor logits,
                        View<const int32_t> targets, float grad_scale) override;
  void do_vocab_parallel_ce_stats(Tensor stats, Tensor target_logit, ConstTensor logits,
                                  View<const int32_t> targets) override;
  void do_vocab_parallel_ce(Tensor losses, Tensor dlogits, ConstTensor logits,
                            View<const int32_t> targets, ConstTensor stats,
                            ConstTensor target_logit, float grad_scale) override;
  void do_attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k, ConstTensor v,
                            int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                            AttnMask mask) override;
  void do_attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout, ConstTensor q,
                             ConstTensor k, ConstTensor v, ConstTensor o, ConstTensor lse,
                             int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                             AttnMask mask) override;
  void do_attention_merge(Tensor o, Tensor lse, ConstTensor o_part, ConstTensor lse_part) override;
  void do_attention_decode(Tensor o, ConstTensor q, ConstTensor k, ConstTensor v, int64_t first,
                           int64_t n_heads, int64_t n_kv_heads, Tensor scratch) override;
  void do_copy(Tensor dst, ConstTensor src) override;
  void do_convert(Tensor dst, ConstTensor src) override;
  void do_fill(Tensor dst, float value) override;
  void do_scale(Tensor x, float factor) override;
  void do_add_into(Tensor dst, ConstTensor src) override;
  double do_sum(ConstTensor x) override;
  double do_sum_squares(ConstTensor x) override;
  double do_noise_probe_pass(Tensor g, Tensor sum, NoiseProbePass pass,
                             View<double> partial) override;
  void do_sgd_update(Tensor p, Tensor buf, ConstTensor g, const SgdStep& s) override;
  void do_signsgd_update(Tensor p, Tensor m, ConstTensor g, const SignSgdStep& s) override;
  void do_adam_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& s) override;
  void do_adamw_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& s) override;
  void do_adagrad_update(Tensor p, Tensor sum, ConstTensor g, const AdagradStep& s) override;
  void do_rmsprop_update(Tensor p, Tensor square_avg, Tensor grad_avg, Tensor buf, ConstTensor g,
                         const RmspropStep& s) override;
  void do_lion_update(Tensor p, Tensor m, ConstTensor g, const LionStep& s) override;
  double do_adafactor_rms(ConstTensor x, View<double> partial) override;
  void do_adafactor_update_matrix(Tensor p, Tensor m, Tensor row, Tensor col, ConstTensor g,
                                  Tensor row_inv, Tensor col_inv, View<double> partial,
                                  const AdafactorStep& s) override;
  void do_adafactor_update_vector(Tensor p, Tensor m, Tensor v, ConstTensor g, View<double> partial,
                                  const AdafactorStep& s) override;

 private:
  Backend& target_;
  DType activations_;
  AddressAllocator addresses_;
  NullStream compute_{"compute"};
};

}  // namespace memo
