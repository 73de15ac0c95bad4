// The CPU backend: memo's fp32 kernels (cpu/kernels.h) behind the Backend interface.
// Every space is host memory from aligned_alloc; the compute stream is the calling thread and
// each copy stream a worker thread (backend/copy_stream.h); products over token rows are exact
// from any multiple of kTokenPanelRows (Note [Reproducible rows] in backend/backend.h).
#pragma once

#include <mutex>

#include "memo/backend/backend.h"
#include "memo/backend/copy_stream.h"

namespace memo {

// Not final: tests derive from it to take the host's direct access to the device space away
// (tests/train/device_staging_test.cc), so the paths a GPU needs run on the CPU.
namespace cpu {
bool bf16_attention_by_default();  // cpu/kernels.h
}  // namespace cpu

struct CpuOptions {
  // Products of bf16 operands natively where the CPU has bf16 kernels (cpu::bf16_products_native);
  // false keeps every kernel f32, so Bf16StorageBackend widens (Note [bf16 storage by
  // conversion]): the reference the native products are checked against.
  bool bf16_products = true;
  // bf16 attention on AMX tiles or vdpbf16ps where the CPU has them (cpu::bf16_attention_native);
  // by default where it is measured faster than the f32 kernels (cpu::bf16_attention_by_default:
  // AMX, AMD's AVX512-BF16 cores, or MEMO_CPU_BF16_ATTENTION); false keeps attention f32.
  bool bf16_attention = cpu::bf16_attention_by_default();
  // The layers' row and elementwise kernels on bf16 tensors as they are (Note [bf16 elementwise on
  // the CPU]: the bits of widening, without the widened copies); false lets Bf16StorageBackend
  // widen them, the reference they are checked against.
  bool bf16_elementwise = true;
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(CpuOptions options = {});
  const char* name() const override { return "cpu"; }
  std::string describe() const override;
  std::string warning() const override;
  bool has_values() const override { return true; }
  int64_t reproducible_rows() const override;
  DType activation_dtype() const override { return DType::kF32; }
  MemSpace device_space() const override { return MemSpace::kDevice; }
  RawAllocator& allocator(MemSpace space) override;
  bool host_can_access(MemSpace space) const override { return space != MemSpace::kMeta; }
  std::string device_name() const override { return ""; }
  int64_t matmul_workspace_bytes() const override { return 0; }  // the BLAS keeps its own
  void set_matmul_workspace(Tensor) override {}
  int64_t device_free_bytes() override { return 0; }
  Stream& compute_stream() override { return compute_; }
  std::unique_ptr<Stream> make_copy_stream(std::string name, const StreamOptions& options) override;
  void copy_to_host(void* dst, const void* src, int64_t bytes) override;
  void copy_from_host(void* dst, const void* src, int64_t bytes) override;
  double measure_matmul_peak_flops(double seconds) override;
  double measure_bf16_matmul_peak_flops(double seconds) override;
  bool bf16_products() const override;
  bool bf16_attention() const override;
  bool bf16_elementwise() const override { return options_.bf16_elementwise; }

  int64_t attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                          int64_t n_kv_heads) override;
  int64_t attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                           int64_t n_kv_heads) override;
  int64_t bf16_attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                               int64_t n_kv_heads) override;
  int64_t bf16_attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                                int64_t n_kv_heads) override;
  int64_t attention_decode_scratch_numel(int64_t keys) override;
  int64_t noise_probe_partial_numel(int64_t n) override;
  int64_t adafactor_partial_numel(int64_t rows, int64_t numel) override;

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
  HostAllocator host_{MemSpace::kHost};
  HostAllocator pinned_{MemSpace::kPinnedHost};
  HostAllocator device_{MemSpace::kDevice};
  HostStream compute_{"compute"};
  CpuOptions options_;
  std::mutex peak_mutex_;
  double peak_flops_ = 0.0, peak_seconds_ = -1.0;  // the longest measurement so far
  double bf16_peak_flops_ = 0.0, bf16_peak_seconds_ = -1.0;
};

// The process's CPU backend, for code that runs on the CPU by definition (tests, CPU benchmarks,
// the default of Model). Its mutable state: counters of its compute stream, and the measured
// matrix-product peak.
CpuBackend& cpu_backend();

}  // namespace memo
